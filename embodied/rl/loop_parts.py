"""What both training loops share (this room's train.py and embodied/distributed/trainer.py),
and what every command that replays a checkpoint needs: the env a config names, the
evaluation seeds, a checkpoint's config, and the end of an iteration (evaluate, checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from embodied.config import EnvConfig, ExperimentConfig, config_from_dict, to_dict
from embodied.eval.evaluate import EvalResult, evaluate
from embodied.run.checkpoint import load_checkpoint, save_checkpoint
from embodied.run.logger import Logger
from sims.registry import make_env
from sims.vecenv import VecEnv

EVAL_SEED_BASE = 1_000_000  # evaluation seeds never overlap training seeds


def build_env(cfg: EnvConfig, num_envs: int | None = None, device: Any = None) -> VecEnv:
    """The env of cfg; with a device (torch.device), ManiSkill tasks run where it is (physx_cuda on
    CUDA, so observations never leave the GPU; physx_cpu on the CPU)."""
    extra = {"cameras": tuple(cfg.cameras)} if cfg.obs_mode == "rgb" else {}
    if device is not None and cfg.task.startswith("ms:"):
        extra["sim_backend"] = "physx_cuda" if device.type == "cuda" else "physx_cpu"
    if cfg.rollout != "mean":
        extra["rollout"] = cfg.rollout
    if cfg.model_noise != 0.0:
        extra["model_noise"] = cfg.model_noise
    return make_env(cfg.task, num_envs or cfg.num_envs, obs_mode=cfg.obs_mode, reward_mode=cfg.reward_mode,
                    image_size=cfg.image_size, num_threads=cfg.num_threads,
                    randomization=cfg.randomization, reality=cfg.reality, **extra)


def eval_seeds(n: int) -> list[int]:
    return list(range(EVAL_SEED_BASE, EVAL_SEED_BASE + n))


def config_from_checkpoint(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """The config a checkpoint was trained with, with key=value overrides applied."""
    _, meta, _ = load_checkpoint(path)
    return config_from_dict(meta["config"], overrides)


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
        per = result.per_task()
        if len(per) > 1:  # a multi-task run: each task's success on the console too
            logger.print("  per task: " + ", ".join(f"{t} {v:.2f}" for t, v in per.items()))
            summary.setdefault("eval_per_task", []).append((env_steps, per))
    if (tc.save_every and it % tc.save_every == 0) or last:
        if result is not None:
            summary["success_after"] = result.success_rate
            summary["video"] = str(result.video) if result.video else summary.get("video")
        meta = {"config": to_dict(cfg), "iteration": it, "env_steps": env_steps, "summary": summary}
        ckpt = save_checkpoint(run_dir / "checkpoints", f"iter_{it:06d}", policy, state(), meta)
        summary["checkpoint"] = str(ckpt)
    return result
