"""The PPO training loop, top to bottom: collect, update, log, evaluate, checkpoint."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from embodied.checkpoint import load_checkpoint, save_checkpoint
from embodied.config import EnvConfig, ExperimentConfig, config_from_dict, to_dict
from embodied.evaluate import EvalResult, evaluate
from embodied.learner import PPOLearner
from embodied.logger import Logger
from embodied.rollout import RolloutCollector
from policies.base import load_weights
from policies.registry import build_policy
from sims.registry import make_env
from sims.vecenv import VecEnv

EVAL_SEED_BASE = 1_000_000  # evaluation seeds never overlap training seeds


def build_env(cfg: EnvConfig, num_envs: int | None = None) -> VecEnv:
    return make_env(cfg.task, num_envs or cfg.num_envs, obs_mode=cfg.obs_mode,
                    reward_mode=cfg.reward_mode, image_size=cfg.image_size, num_threads=cfg.num_threads)


def eval_seeds(n: int) -> list[int]:
    return list(range(EVAL_SEED_BASE, EVAL_SEED_BASE + n))


def config_from_checkpoint(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """The config a checkpoint was trained with, with key=value overrides applied."""
    _, meta, _ = load_checkpoint(path)
    return config_from_dict(meta["config"], overrides)


def train(cfg: ExperimentConfig, resume: str | Path | None = None) -> dict[str, Any]:
    """Train with PPO; return a summary (success before/after, paths)."""
    tc = cfg.train
    run_dir = Path(tc.run_dir)
    if tc.torch_threads:
        torch.set_num_threads(tc.torch_threads)
    torch.manual_seed(tc.seed)

    env = build_env(cfg.env)
    policy = build_policy(cfg.policy, env.spec)
    learner = PPOLearner(policy, cfg.ppo)
    collector = RolloutCollector(env, policy, cfg.ppo.rollout_steps)
    steps_per_iter = env.num_envs * cfg.ppo.rollout_steps * policy.chunk_size
    num_iters = math.ceil(tc.total_steps / steps_per_iter)
    eval_env = build_env(cfg.env, min(tc.eval_episodes, 64))
    seeds = eval_seeds(tc.eval_episodes)

    start_iter, summary = 0, {}
    if resume is not None:
        ckpt, meta, state = load_checkpoint(resume)
        from safetensors.torch import load_file

        load_weights(policy, load_file(str(ckpt / "policy" / "model.safetensors")), str(ckpt))
        learner.load_state_dict(state["learner"])
        env.load_state_dict(state["env"])
        collector.load_state_dict(state["collector"])
        torch.set_rng_state(state["torch_rng"])
        start_iter, summary = meta["iteration"], meta.get("summary", {})
    else:
        collector.reset(seed=tc.seed)
        policy.update_normalizer(collector.obs)
        summary["success_before"] = evaluate(policy, eval_env, seeds).success_rate

    logger = Logger(run_dir / "tb", num_iters * steps_per_iter, start_iter * steps_per_iter, tc.progress)
    logger.print(f"run {run_dir}: {cfg.env.task}, {env.num_envs} envs, {num_iters} iterations of "
                 f"{steps_per_iter} steps; success before training {summary['success_before']:.2f}")
    result: EvalResult | None = None
    t_start = time.time()
    for it in range(start_iter, num_iters):
        step = (it + 1) * steps_per_iter
        t0 = time.time()
        traj = collector.collect()
        t1 = time.time()
        stats = learner.update(traj)
        policy.update_normalizer(traj.obs)
        t2 = time.time()

        rollout = collector.pop_episode_stats()
        rollout["reward_per_step"] = float(traj.chunk_rewards.mean())
        logger.log("train", stats, step)
        logger.log("rollout", rollout, step)
        logger.log("time", {"steps_per_second": steps_per_iter / (t2 - t0), "collect_seconds": t1 - t0,
                            "update_seconds": t2 - t1, "wall_seconds": time.time() - t_start}, step)
        logger.progress(steps_per_iter, rollout_success=rollout.get("success_rate", float("nan")),
                        kl=stats["approx_kl"])

        last = it + 1 == num_iters
        if (tc.eval_every and (it + 1) % tc.eval_every == 0) or last:
            video = run_dir / "videos" / f"iter_{it + 1:06d}.mp4" if (last and tc.video_episodes) else None
            result = evaluate(policy, eval_env, seeds, video_path=video, video_episodes=tc.video_episodes)
            logger.log("eval", result.as_dict(), step)
            logger.print(f"iter {it + 1}/{num_iters} step {step}: eval success {result.success_rate:.2f}")
        if (tc.save_every and (it + 1) % tc.save_every == 0) or last:
            if result is not None:
                summary["success_after"] = result.success_rate
                summary["video"] = str(result.video) if result.video else summary.get("video")
            trainer_state = {"learner": learner.state_dict(), "env": env.state_dict(),
                             "collector": collector.state_dict(), "torch_rng": torch.get_rng_state()}
            meta = {"config": to_dict(cfg), "iteration": it + 1, "env_steps": step, "summary": summary}
            ckpt = save_checkpoint(run_dir / "checkpoints", f"iter_{it + 1:06d}", policy, trainer_state, meta)
            summary["checkpoint"] = str(ckpt)
    logger.close()
    env.close()
    eval_env.close()
    summary.update(run_dir=str(run_dir), tensorboard=str(run_dir / "tb"), wall_seconds=time.time() - t_start)
    return summary
