"""The RL training loop (PPO or GRPO), top to bottom: collect, update, log, evaluate, checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from embodied.config import ExperimentConfig
from embodied.eval.evaluate import EvalResult, evaluate
from embodied.rl.diagnostics import per_task_line, summary_line
from embodied.run.env import build_env, eval_seeds
from embodied.rl.loop_parts import end_iteration, memory_preflight, preflight, save_iteration
from embodied.rl.registry import algorithm
from embodied.run.checkpoint import load_checkpoint
from embodied.run.logger import Logger
from embodied.run.device import resolve_device
from embodied.run.stop import StopFlag, program, stoppable
from policies.registry import build_policy
from sims.registry import batch_for
from sims.vecenv import VecEnv

def build_algorithm(cfg: ExperimentConfig, env: VecEnv, policy: Any) -> tuple[Any, Any]:
    """(collector, learner) of cfg.train.algorithm (embodied/rl/registry.py)."""
    alg = algorithm(cfg.train.algorithm)
    return alg.collector(cfg, env, policy), alg.learner(cfg, policy)


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
    device = resolve_device(tc.device)

    env = build_env(cfg.env, device=device)
    policy = build_policy(cfg.policy, env.spec, per_action_value=cfg.ppo.reward_level == "action").to(device)
    memory_preflight(cfg, policy, device, env.spec)  # a VLA's predicted peak; refused if it cannot fit
    collector, learner = build_algorithm(cfg, env, policy)
    eval_env = build_env(cfg.env, batch_for(cfg.env.task, tc.eval_episodes, 64), device=device)
    seeds = eval_seeds(tc.eval_episodes)
    videos = preflight(cfg, eval_env, seeds)
    with stoppable("this iteration") as stop:
        return _train(cfg, resume, env, policy, collector, learner, eval_env, seeds, stop, videos)


def _train(cfg: ExperimentConfig, resume: str | Path | None, env: VecEnv, policy: Any, collector: Any, learner: Any,
           eval_env: VecEnv, seeds: list[int], stop: StopFlag, videos: int) -> dict[str, Any]:
    """train()'s loop, until total_steps or a signal (then a checkpoint of the last iteration and Stopped)."""
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
        before = evaluate(policy, eval_env, seeds, tc.eval_deterministic)
        summary["success_before"] = before.success_rate
        if len(before.per_task()) > 1:  # a multi-task run: each task's start too
            summary["eval_per_task"] = [(0, before.per_task())]
        summary["eval_curve"] = [(0, summary["success_before"])]

    logger = Logger(run_dir / "tb", tc.total_steps, env_steps, tc.progress)
    start = (f"resumed from {summary['checkpoint']} at {env_steps} env steps (success before training "
             f"{summary['success_before']:.2f})" if resume is not None else
             f"success before training {summary['success_before']:.2f}")
    logger.print(f"run {run_dir}: {tc.algorithm} on {cfg.env.task}, {env.num_envs} envs on {next(policy.parameters()).device}, "
                 f"{tc.total_steps} env steps; {start}")
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
        logger.print(summary_line(it, {**stats, **rollout}))  # the update's signal (embodied/rl/diagnostics.py)
        if tc.eval_every and it % tc.eval_every == 0 and (table := per_task_line(stats)):
            logger.print(table)

        result = end_iteration(cfg, it, env_steps, policy, eval_env, seeds, logger, summary, trainer_state, result,
                               videos)
    if stop and summary.get("checkpoint") != str(run_dir / "checkpoints" / f"iter_{it:06d}"):
        save_iteration(cfg, it, env_steps, policy, summary, trainer_state, None)  # while the envs are open
    logger.close()
    env.close()
    eval_env.close()
    stop.check(f"checkpoint {summary.get('checkpoint')} (iteration {it}, {env_steps} of {tc.total_steps} env steps)",
               f"{program()} train --resume {run_dir}")
    summary.update(run_dir=str(run_dir), tensorboard=str(run_dir / "tb"), wall_seconds=time.time() - t_start,
                   env_steps=env_steps, iterations=it)
    return summary
