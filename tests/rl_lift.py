"""Shared pieces of the RL learning tests (tests/test_vla_rl_learning*.py).

The recipes of configs/ on seed 0 of benchmarks/bench_vla_recipes.py: 200 expert demos of
PushCube (front and wrist cameras, 64 px, DART noise 0.3), a few-shot SFT of a tiny VLA
(sft_pushcube_flow_fewshot.yaml or sft_pushcube_ar_fewshot.yaml), then an RL config from
it, evaluated every 5 iterations on the same 100 held-out seeds (deterministic policy).
The demos and each SFT checkpoint are built once per test session and shared between the
modules (and pytest-xdist workers) that need them; a learning test of another recipe
(bench_vla_recipes.py's seed 0) takes a few lines.

A lift is judged by the mean of the last three evaluations minus the SFT policy's success:
one evaluation of 100 episodes has a standard error of 4-5 points and moves by 5-10 points
from one evaluation to the next.
"""

from __future__ import annotations

from pathlib import Path

import torch

from embodied.collect import collect_demos
from embodied.config import load_config
from embodied.lerobot import LeRobotDataset
from embodied.sft import build_policy, load_sft_config, train_sft
from embodied.train import train

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def pushcube_demos(build_once) -> Path:
    def build(path: Path) -> None:
        collect_demos("PushCube", 200, path, seed=100_000, obs_mode="rgb", image_size=64,
                      cameras=["front", "wrist"], noise=0.3)
    return build_once("pushcube_demos", build)


def few_shot_sft(build_once, family: str) -> Path:
    """The few-shot SFT checkpoint of `family` ("flow" or "ar") on pushcube_demos."""
    data = pushcube_demos(build_once)

    def build(path: Path) -> None:
        cfg = load_sft_config(CONFIGS / f"sft_pushcube_{family}_fewshot.yaml",
                              [f"dataset={data}", f"run_dir={path}", "eval_every=0", "seed=0"])
        dataset = LeRobotDataset(cfg.dataset, chunk_size=cfg.chunk_size)
        torch.manual_seed(0)
        train_sft(build_policy(cfg, dataset.stats), dataset, cfg, None, log=lambda _: None)
    return build_once(f"sft_{family}", build) / "final"  # train_sft's final checkpoint


def rl_lift(config: str, sft: Path, run_dir: Path, steps: int) -> tuple[float, list[float], float]:
    """RL from `sft` with configs/`config`: (success before, eval curve, mean of the last three)."""
    cfg = load_config(CONFIGS / config, [
        f"policy.init_from={sft}", f"train.run_dir={run_dir}", f"train.total_steps={steps}", "train.seed=0",
        "train.eval_every=5", "train.eval_episodes=100", "train.video_episodes=0", "train.save_every=0",
        "train.progress=false"])
    summary = train(cfg)
    curve = [rate for _, rate in summary["eval_curve"]]
    late = sum(curve[-3:]) / 3
    print(f"{config}: success {summary['success_before']:.2f} after SFT; curve {curve} (last three {late:.2f})")
    assert summary["success_before"] < 0.6 and len(curve) >= 6  # few-shot: room to improve; evaluated
    return summary["success_before"], curve, late
