"""What both training loops share (this room's train.py and embodied/distributed/trainer.py):
the end of an iteration (evaluate, checkpoint), what a checkpoint records of its policy, and
the checks before the first step. The env, the evaluation seeds and checkpoint loading, which
every replaying command needs too, are embodied/run/env.py's and embodied/run/load.py's."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable

from embodied.config import ExperimentConfig, to_dict
from embodied.eval.evaluate import EvalResult, evaluate
from embodied.run.checkpoint import save_checkpoint
from embodied.run.logger import Logger
from sims.vecenv import EnvSpec, VecEnv


def end_iteration(cfg: ExperimentConfig, it: int, env_steps: int, policy: Any, eval_env: VecEnv,
                  seeds: list[int], logger: Logger, summary: dict[str, Any], state: Callable[[], dict],
                  result: EvalResult | None, video_episodes: int | None = None) -> EvalResult | None:
    """What ends iteration `it` in both training loops (this file's and the roles',
    embodied/distributed/trainer.py): an evaluation every train.eval_every iterations and at
    the last one (with the video there), a checkpoint of the policy and state() every
    train.save_every and at the last. Updates `summary`; returns the latest evaluation.
    video_episodes: of the final video (None: train.video_episodes; `preflight` gives it)."""
    tc = cfg.train
    videos = tc.video_episodes if video_episodes is None else video_episodes
    run_dir = Path(tc.run_dir)
    last = env_steps >= tc.total_steps
    if (tc.eval_every and it % tc.eval_every == 0) or last:
        video = run_dir / "videos" / f"iter_{it:06d}.mp4" if (last and videos) else None
        result = evaluate(policy, eval_env, seeds, deterministic=tc.eval_deterministic, video_path=video,
                          video_episodes=videos)
        logger.log("eval", result.as_dict(), env_steps)
        summary.setdefault("eval_curve", []).append((env_steps, result.success_rate))
        logger.print(f"iter {it} step {env_steps}: eval success {result.success_rate:.2f}")
        per = result.per_task()
        if len(per) > 1:  # a multi-task run: each task's success on the console too
            logger.print(result.per_task_line())
            summary.setdefault("eval_per_task", []).append((env_steps, per))
    if (tc.save_every and it % tc.save_every == 0) or last:
        policy.record = policy_record(cfg, policy, eval_env.spec)
        save_iteration(cfg, it, env_steps, policy, summary, state, result)
    return result


def save_iteration(cfg: ExperimentConfig, it: int, env_steps: int, policy: Any, summary: dict[str, Any],
                   state: Callable[[], dict], result: EvalResult | None) -> Path:
    """Checkpoint iteration `it` into RUN/checkpoints/iter_<it> (and point `latest` at it)."""
    if result is not None:
        summary["success_after"] = result.success_rate
        summary["video"] = str(result.video) if result.video else summary.get("video")
    policy.record = policy_record(cfg, policy)  # into policy/config.json: what eval, serve, init_from check
    meta = {"config": to_dict(cfg), "iteration": it, "env_steps": env_steps, "summary": summary,
            "trained_on": policy.record}
    ckpt = save_checkpoint(Path(cfg.train.run_dir) / "checkpoints", f"iter_{it:06d}", policy, state(), meta)
    summary["checkpoint"] = str(ckpt)
    return ckpt


def policy_record(cfg: ExperimentConfig, policy: Any, spec: EnvSpec | None = None) -> dict[str, Any]:
    """What a checkpoint records of what its policy reads and writes: task, observation keys,
    action width (policies.base.check_fits compares them with an env), and the spec of the env
    it ran in (`env_spec`: EnvSpec's fields but num_envs; `embodied serve` reads the robot's
    action width, privileged width and time limit from it). Without `spec`, the policy's last
    record keeps its env_spec when it names this task."""
    if cfg.policy.name == "mlp":
        keys = [cfg.policy.obs_key]
    else:
        keys = ["state", *(f"rgb_{c}" for c in cfg.env.cameras)] if cfg.env.obs_mode == "rgb" else ["state"]
    rec = {"task": cfg.env.task, "obs_mode": cfg.env.obs_mode, "obs_keys": keys,
           "action_dim": int(policy.config.action_dim)}
    env_spec = spec_record(spec) if spec is not None else (getattr(policy, "record", None) or {}).get("env_spec")
    if env_spec and env_spec.get("task") != cfg.env.task:  # a record of the run it was initialised from
        env_spec = None
    if env_spec:
        rec["env_spec"] = env_spec
    return rec


def spec_record(spec: EnvSpec) -> dict[str, Any]:
    """An EnvSpec as JSON (tuples as lists), without num_envs (a replay picks its own)."""
    out = dataclasses.asdict(spec)
    out.pop("num_envs", None)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def preflight(cfg: ExperimentConfig, eval_env: VecEnv, seeds: list[int]) -> int:
    """What the run's end needs, checked before its first step: the video's frames render. Returns
    the episodes of the final video: train.video_episodes, or 0 when the env cannot render (a state
    MetaWorld task, a state-only world model), which is said in one line before the first step."""
    from sims.vecenv import EnvError

    if cfg.train.video_episodes:
        try:
            eval_env.reset(seed=[seeds[0]] * eval_env.num_envs)
            eval_env.render([0])
        except EnvError as e:
            print(f"train.video_episodes: {cfg.env.task} cannot render a video ({str(e).splitlines()[0]}); "
                  f"this run writes none (train.video_episodes=0 leaves this line out)", file=sys.stderr)
            return 0
    return cfg.train.video_episodes


def memory_preflight(cfg: ExperimentConfig, policy: Any, device: Any, spec: Any) -> None:
    """A VLA's predicted peak memory for this run (policies/memory.py), said in one line before the
    learner is built; ConfigError (exit 2) when it cannot fit the device. The minibatch: PPO's
    rollout_steps x num_envs / minibatches; GRPO's longest episodes (the env's time limit in
    policy steps) x num_envs / minibatches."""
    if not getattr(policy, "is_vla", False) or policy.name not in ("flow_vla", "ar_vla"):
        return
    import torch

    from embodied.config_loader import ConfigError
    from policies.memory import Plan, check_device

    env, p = cfg.env, cfg.ppo
    steps = p.rollout_steps if cfg.train.algorithm != "grpo" else -(-spec.max_episode_steps // policy.config.executed_len)
    plan = Plan(step="rl", batch=max(1, steps * env.num_envs // p.minibatches), act_batch=env.num_envs,
                freeze=cfg.policy.freeze, lora_rank=cfg.policy.lora_rank, frozen_dtype=cfg.policy.frozen_dtype,
                checkpointing=cfg.policy.checkpointing, optimizer=p.optimizer,
                kl_reference=p.kl_ref_coef > 0 or p.track_ref_kl, autocast_bf16=torch.device(device).type == "cuda")
    try:
        print(check_device(plan, policy, device), file=sys.stderr)
    except MemoryError as e:
        raise ConfigError(str(e)) from None
