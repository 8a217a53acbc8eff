"""The RL training loop (PPO or GRPO), top to bottom: collect, update, log, evaluate, checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

from embodied.run.checkpoint import load_checkpoint, save_checkpoint
from embodied.config import EnvConfig, ExperimentConfig, config_from_dict, to_dict
from embodied.eval.evaluate import EvalResult, evaluate
from embodied.rl.episodes import GroupCollector
from embodied.rl.learner import GRPOLearner, PPOLearner
from embodied.rl.rollout import RolloutCollector
from embodied.run.logger import Logger
from embodied.run.stop import StopFlag, stoppable
from policies.registry import build_policy
from sims.registry import make_env
from sims.vecenv import VecEnv

EVAL_SEED_BASE = 1_000_000  # evaluation seeds never overlap training seeds


def build_env(cfg: EnvConfig, num_envs: int | None = None) -> VecEnv:
    extra = {"cameras": tuple(cfg.cameras)} if cfg.obs_mode == "rgb" else {}
    if cfg.rollout != "mean":
        extra["rollout"] = cfg.rollout
    if cfg.model_noise != 0.0:
        extra["model_noise"] = cfg.model_noise
    if cfg.allow_failed_model:
        extra["allow_failed_model"] = True
    return make_env(cfg.task, num_envs or cfg.num_envs, obs_mode=cfg.obs_mode, reward_mode=cfg.reward_mode,
                    image_size=cfg.image_size, num_threads=cfg.num_threads,
                    randomization=cfg.randomization, reality=cfg.reality, **extra)


def eval_seeds(n: int) -> list[int]:
    return list(range(EVAL_SEED_BASE, EVAL_SEED_BASE + n))


def config_from_checkpoint(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """The config a checkpoint was trained with, with key=value overrides applied."""
    _, meta, _ = load_checkpoint(path)
    return config_from_dict(meta["config"], overrides)


def load_trained(path: str | Path, overrides: list[str] = ()) -> tuple[Path, ExperimentConfig, Any]:
    """(checkpoint dir, its config with overrides, its policy in eval mode) of a checkpoint, a
    checkpoints/ folder or a run directory. The policy's record (what it was trained on) falls
    back to the config's task for checkpoints written before records existed."""
    from embodied.run.checkpoint import resolve_checkpoint
    from policies.base import Policy

    ckpt = resolve_checkpoint(path)
    _, meta, _ = load_checkpoint(ckpt)
    cfg = config_from_dict(meta["config"], overrides)
    policy = Policy.from_pretrained(ckpt / "policy")
    policy.eval()
    if not policy.record:
        policy.record = {"task": meta["config"]["env"]["task"]}
    return ckpt, cfg, policy


def resume_config(path: str | Path, overrides: list[str] = ()) -> tuple[ExperimentConfig, Path]:
    """(config, checkpoint) of `embodied train --resume PATH key=value...`. The run continues in
    the run directory PATH names (a copied run resumes in place), not the one its config
    records; `train.run_dir=NEW` continues it in a new run. ConfigError if continuing an older
    checkpoint in its own run would leave later checkpoints behind `latest`."""
    from embodied.run.checkpoint import newer_checkpoints, resume_point, run_dir_of
    from embodied.config import ConfigError

    ckpt = resume_point(path)
    _, meta, _ = load_checkpoint(ckpt)
    cfg = config_from_dict(meta["config"], overrides)
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


def build_algorithm(cfg: ExperimentConfig, env: VecEnv, policy: Any) -> tuple[Any, Any]:
    """(collector, learner) for cfg.train.algorithm."""
    if cfg.train.algorithm == "grpo":
        collector = GroupCollector(env, policy, cfg.grpo.group_size, seed=cfg.train.seed)
        return collector, GRPOLearner(policy, cfg.ppo, cfg.grpo)
    return RolloutCollector(env, policy, cfg.ppo.rollout_steps), PPOLearner(policy, cfg.ppo)


def end_iteration(cfg: ExperimentConfig, it: int, env_steps: int, policy: Any, eval_env: VecEnv,
                  seeds: list[int], logger: Logger, summary: dict[str, Any], state: Callable[[], dict],
                  result: EvalResult | None) -> EvalResult | None:
    """What ends iteration `it` in both training loops (this file's and the roles',
    embodied/distributed/trainer.py): an evaluation every train.eval_every iterations and at
    the last one (with the video there), a checkpoint of the policy and state() every
    train.save_every and at the last. Updates `summary`; returns the latest evaluation."""
    tc = cfg.train
    run_dir = Path(tc.run_dir)
    last = env_steps >= tc.total_steps
    if (tc.eval_every and it % tc.eval_every == 0) or last:
        video = run_dir / "videos" / f"iter_{it:06d}.mp4" if (last and tc.video_episodes) else None
        result = evaluate(policy, eval_env, seeds, deterministic=tc.eval_deterministic, video_path=video,
                          video_episodes=tc.video_episodes)
        logger.log("eval", result.as_dict(), env_steps)
        summary.setdefault("eval_curve", []).append((env_steps, result.success_rate))
        logger.print(f"iter {it} step {env_steps}: eval success {result.success_rate:.2f}")
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
    action shape (embodied.checkpoint.check_compatible compares them)."""
    return {"task": cfg.env.task, "obs_mode": cfg.env.obs_mode, "obs_keys": observed_keys(cfg),
            "action_dim": int(policy.config.action_dim)}


def observed_keys(cfg: ExperimentConfig) -> list[str]:
    """The observation keys a policy of cfg reads: its obs_key (MLP) or state + cameras (VLA)."""
    if cfg.policy.name == "mlp":
        return [cfg.policy.obs_key]
    return ["state", *(f"rgb_{c}" for c in cfg.env.cameras)] if cfg.env.obs_mode == "rgb" else ["state"]


def preflight(cfg: ExperimentConfig, eval_env: VecEnv, seeds: list[int]) -> None:
    """What the run's end needs, checked before its first step: the video's frames render."""
    from embodied.config import ConfigError
    from sims.vecenv import EnvError

    if cfg.train.video_episodes:
        try:
            eval_env.reset(seed=[seeds[0]] * eval_env.num_envs)
            eval_env.render([0])
        except EnvError as e:
            raise ConfigError(f"train.video_episodes: {cfg.train.video_episodes}, but {cfg.env.task} cannot render a "
                              f"video ({str(e).splitlines()[0]}); allowed: train.video_episodes=0") from None


def train(cfg: ExperimentConfig, resume: str | Path | None = None) -> dict[str, Any]:
    """Train with PPO or GRPO; return a summary (success before/after, eval curve, paths).

    One iteration: collect (PPO: rollout_steps policy steps of every env; GRPO: one episode
    per env), update, log; every eval_every iterations a seeded deterministic evaluation,
    every save_every a checkpoint. It stops once total_steps env steps were collected.
    With train.backend or train.placement set, the same loop runs over roles
    (embodied/distributed/trainer.py, docs/distributed.md).
    """
    if cfg.train.backend is not None or cfg.train.placement is not None:
        from embodied.distributed.trainer import train_with_roles

        return train_with_roles(cfg, resume)
    tc = cfg.train
    run_dir = Path(tc.run_dir)
    if tc.torch_threads:
        torch.set_num_threads(tc.torch_threads)
    torch.manual_seed(tc.seed)

    env = build_env(cfg.env)
    policy = build_policy(cfg.policy, env.spec, per_action_value=cfg.ppo.reward_level == "action")
    collector, learner = build_algorithm(cfg, env, policy)
    eval_env = build_env(cfg.env, min(tc.eval_episodes, 64))
    seeds = eval_seeds(tc.eval_episodes)
    preflight(cfg, eval_env, seeds)
    with stoppable("this iteration") as stop:
        return _train(cfg, resume, env, policy, collector, learner, eval_env, seeds, stop)


def _train(cfg: ExperimentConfig, resume: str | Path | None, env: VecEnv, policy: Any, collector: Any, learner: Any,
           eval_env: VecEnv, seeds: list[int], stop: StopFlag) -> dict[str, Any]:
    tc = cfg.train
    run_dir = Path(tc.run_dir)
    it, env_steps, summary = 0, 0, {}
    if resume is not None:
        ckpt, meta, state = load_checkpoint(resume)
        policy.load_saved_weights(ckpt / "policy")
        learner.load_state_dict(state["learner"])
        env.load_state_dict(state["env"])
        collector.load_state_dict(state["collector"])
        torch.set_rng_state(state["torch_rng"])
        it, env_steps, summary = meta["iteration"], meta["env_steps"], meta.get("summary", {})
        summary["checkpoint"] = str(ckpt)  # the recorded path may be of the run this one was copied from
    else:
        collector.reset(seed=tc.seed)
        if collector.obs is not None:
            policy.update_normalizer(collector.obs)
        summary["success_before"] = evaluate(policy, eval_env, seeds, tc.eval_deterministic).success_rate
        summary["eval_curve"] = [(0, summary["success_before"])]

    logger = Logger(run_dir / "tb", tc.total_steps, env_steps, tc.progress)
    logger.print(f"run {run_dir}: {tc.algorithm} on {cfg.env.task}, {env.num_envs} envs, {tc.total_steps} env "
                 f"steps; success before training {summary['success_before']:.2f}")
    def trainer_state() -> dict[str, Any]:
        return {"learner": learner.state_dict(), "env": env.state_dict(), "collector": collector.state_dict(),
                "torch_rng": torch.get_rng_state()}

    result: EvalResult | None = None
    t_start = time.time()
    while env_steps < tc.total_steps and not stop:
        t0 = time.time()
        traj = collector.collect()
        t1 = time.time()
        stats = learner.update(traj)
        policy.update_normalizer(traj.obs)
        t2 = time.time()
        mask = traj.valid if traj.episode_mask is None else traj.valid & traj.episode_mask[..., None]
        new_steps = int(mask.sum())
        env_steps, it = env_steps + new_steps, it + 1

        rollout = collector.pop_episode_stats()
        rollout["reward_per_step"] = float(traj.rewards.sum() / max(new_steps, 1))
        logger.log("train", stats, env_steps)
        logger.log("rollout", rollout, env_steps)
        logger.log("time", {"steps_per_second": new_steps / (t2 - t0), "collect_seconds": t1 - t0,
                            "update_seconds": t2 - t1, "wall_seconds": time.time() - t_start}, env_steps)
        logger.progress(new_steps, rollout_success=rollout.get("success_rate", float("nan")),
                        kl=stats.get("approx_kl", 0.0))

        result = end_iteration(cfg, it, env_steps, policy, eval_env, seeds, logger, summary, trainer_state, result)
    if stop:  # checkpoint now, while the envs are open (their state is part of it)
        ckpt = Path(cfg.train.run_dir) / "checkpoints" / f"iter_{it:06d}"
        if summary.get("checkpoint") != str(ckpt):
            save_iteration(cfg, it, env_steps, policy, summary, trainer_state, None)
    logger.close()
    env.close()
    eval_env.close()
    stop.check(f"checkpoint {summary.get('checkpoint')} (iteration {it}, {env_steps} of {tc.total_steps} env steps)",
               f"embodied train --resume {run_dir}")
    summary.update(run_dir=str(run_dir), tensorboard=str(run_dir / "tb"), wall_seconds=time.time() - t_start,
                   env_steps=env_steps, iterations=it)
    return summary

