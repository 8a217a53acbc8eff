"""What both training loops share (this room's train.py and embodied/distributed/trainer.py),
and what every command that replays a checkpoint needs: the env a config names, the
evaluation seeds, a checkpoint's config, and the end of an iteration (evaluate, checkpoint)."""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any, Callable

from embodied.config import EnvConfig, ExperimentConfig, PolicyConfig, config_from_dict, to_dict
from embodied.eval.evaluate import EVAL_SEED_BASE, EvalResult, eval_seeds, evaluate  # noqa: F401 (re-exported)
from embodied.run.checkpoint import CheckpointError, load_checkpoint, policy_dir, resolve_checkpoint, save_checkpoint
from embodied.run.logger import Logger
from sims.registry import device_kwargs, make_env
from sims.vecenv import VecEnv


def build_env(cfg: EnvConfig, num_envs: int | None = None, device: Any = None) -> VecEnv:
    """The env of cfg; with a device (torch.device), ManiSkill tasks run where it is (physx_cuda on
    CUDA, so observations never leave the GPU; physx_cpu on the CPU)."""
    extra = {"cameras": tuple(cfg.cameras)} if cfg.obs_mode == "rgb" else {}
    if device is not None:  # the family's own settings for a device (ManiSkill: physx_cuda on CUDA)
        extra.update(device_kwargs(cfg.task, device))
    if cfg.backend != "cpu":
        extra["backend"] = cfg.backend
        if device is not None:
            extra["device"] = device
    if cfg.rollout != "mean":
        extra["rollout"] = cfg.rollout
    if cfg.model_noise != 0.0:
        extra["model_noise"] = cfg.model_noise
    if cfg.allow_failed_model:
        extra["allow_failed_model"] = True
    if cfg.max_episode_steps is not None:
        extra["max_episode_steps"] = cfg.max_episode_steps
    return make_env(cfg.task, num_envs or cfg.num_envs, obs_mode=cfg.obs_mode, reward_mode=cfg.reward_mode,
                    image_size=cfg.image_size, num_threads=cfg.num_threads,
                    randomization=cfg.randomization, reality=cfg.reality, **extra)


def config_from_checkpoint(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """The config a checkpoint was trained with, with key=value overrides applied."""
    _, meta, _ = load_checkpoint(path)
    return config_from_dict(meta["config"], overrides)


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


def policy_record(cfg: ExperimentConfig, policy: Any) -> dict[str, Any]:
    """What a checkpoint records of what its policy reads and writes: task, observation keys,
    action width (policies.base.check_fits compares them with an env)."""
    if cfg.policy.name == "mlp":
        keys = [cfg.policy.obs_key]
    else:
        keys = ["state", *(f"rgb_{c}" for c in cfg.env.cameras)] if cfg.env.obs_mode == "rgb" else ["state"]
    return {"task": cfg.env.task, "obs_mode": cfg.env.obs_mode, "obs_keys": keys,
            "action_dim": int(policy.config.action_dim)}


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


def load_trained(path: str | Path, overrides: list[str] = ()) -> tuple[Path, ExperimentConfig, Any]:
    """(checkpoint dir, its config with overrides, its policy in eval mode) of what `embodied eval`,
    `serve`, `sim2real` and `collect --policy` replay: a checkpoint, a checkpoints/ folder or a run
    directory of `embodied train`, or a policy directory (`embodied sft`'s final or its run
    directory, a checkpoint's policy/), whose config is `policy_config`'s. The policy's record
    (what it was trained on) falls back to the config's task for checkpoints written before
    records existed."""
    from policies.base import Policy

    try:
        ckpt = resolve_checkpoint(path)
    except CheckpointError:
        bare = policy_dir(path)
        if bare is None:
            raise CheckpointError(f"checkpoint not found: {path} (expected a checkpoint, checkpoints/, "
                                  "checkpoints/latest or run directory of `embodied train`, or a policy directory: "
                                  "`embodied sft`'s final)") from None
        policy = Policy.from_pretrained(bare)
        policy.eval()
        return bare, policy_config(bare, policy, overrides), policy
    _, meta, _ = load_checkpoint(ckpt)
    cfg = config_from_dict(meta["config"], overrides)
    policy = Policy.from_pretrained(ckpt / "policy")
    policy.eval()
    if not policy.record:
        policy.record = {"task": meta["config"]["env"]["task"]}
    return ckpt, cfg, policy


def policy_config(path: Path, policy: Any, overrides: list[str] = ()) -> ExperimentConfig:
    """The config under which a bare policy directory is replayed: the defaults, with the env its
    record names (task, observation mode, the cameras of its rgb_<camera> keys, else a VLA's
    configured cameras) and the image size of its vision tower, then `overrides`; the task's own
    time limit, as `embodied sft` evaluates. CheckpointError (one line) if it records no task and
    no env.task= is given."""
    rec = policy.record or {}
    if not rec.get("task") and not any(o.strip().startswith("env.task=") for o in overrides):
        raise CheckpointError(f"{path / 'config.json'}: records no task the policy was trained on (`embodied sft` "
                              "records it); allowed: env.task=TASK after the path (embodied eval)")
    env: dict[str, Any] = {k: rec[k] for k in ("task", "obs_mode") if rec.get(k)}
    cams = [k[len("rgb_"):] for k in rec.get("obs_keys") or [] if k.startswith("rgb_")]
    cams = cams or list(getattr(policy.config, "cameras", None) or [])  # a VLA's own cameras
    if cams:
        env["cameras"] = cams
        env.setdefault("obs_mode", "rgb")
    vision = getattr(policy.config, "vision", None)
    if isinstance(vision, dict) and vision.get("image_size"):
        env["image_size"] = int(vision["image_size"])
    named = policy.name in typing.get_args(typing.get_type_hints(PolicyConfig)["name"])
    raw = {"env": env, "policy": {"name": policy.name, "init_from": str(path)} if named else {}}
    return config_from_dict(raw, overrides)


def resume_config(path: str | Path, overrides: list[str] = ()) -> tuple[ExperimentConfig, Path]:
    """(config, checkpoint) of `embodied train --resume PATH key=value...`. The run continues in
    the run directory PATH names (a copied run resumes in place), not the one its config
    records; `train.run_dir=NEW` continues it in a new run. ConfigError if continuing an older
    checkpoint in its own run would leave later checkpoints behind `latest`."""
    from embodied.config import ConfigError
    from embodied.run.checkpoint import newer_checkpoints, resume_point, run_dir_of

    ckpt = resume_point(path)
    _, meta, _ = load_checkpoint(ckpt)
    cfg = config_from_dict(meta["config"], overrides)
    if cfg.env.task != meta["config"]["env"]["task"]:
        raise ConfigError(f"env.task: {cfg.env.task}, but the run resumed from {ckpt} trains on "
                          f"{meta['config']['env']['task']}; allowed: {meta['config']['env']['task']} (another task is a "
                          f"new run: policy.init_from={ckpt / 'policy'})")
    own = run_dir_of(ckpt)
    if not any(o.strip().startswith("train.run_dir=") for o in overrides):
        if own is None:
            raise ConfigError(f"--resume: {path} is a checkpoint outside a run directory (RUN/checkpoints/NAME); "
                              "name the run to continue it in: train.run_dir=DIR")
        cfg.train.run_dir = str(own)
    named = Path(path)
    picked = not ((named / "latest").is_file() or (named / "checkpoints" / "latest").is_file())
    if picked and own is not None and Path(cfg.train.run_dir).resolve() == own.resolve():
        later = newer_checkpoints(ckpt)
        if later:
            raise ConfigError(f"--resume: {ckpt.name} is older than {', '.join(later)} of {own}; continuing it there "
                              f"would overwrite them and move `latest` back; allowed: --resume {own} (its newest "
                              f"checkpoint), or train.run_dir=NEW_DIR to branch a new run from {ckpt.name}")
    return cfg, ckpt
