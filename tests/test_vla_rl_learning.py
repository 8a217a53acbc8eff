"""Learning: PPO with Flow-Noise lifts a few-shot SFT flow VLA on PushCube, from pixels.

The recipe of configs/: 200 expert demos of PushCube (front and wrist cameras, DART noise
0.3), a few-shot SFT of the tiny flow VLA (sft_pushcube_flow_fewshot.yaml), then PPO with
Flow-Noise exploration (std 0.2-0.5) and a privileged-state critic (rl_pushcube_flow_noise.yaml)
for 100k env steps, evaluated every 5 iterations on 100 held-out seeds (deterministic). The
test asserts that the mean of the last three evaluations is at least 20 points above the SFT
policy: a single evaluation moves by 5-10 points from one to the next, and runs vary between
processes.

Measured on 2 CPU cores (2026-11-22), the demos and SFT seed of bench_vla_recipes.py's seed 0:
0.20 -> 0.53, 0.43, 0.41 (last three +0.26) in one run of this file; in a clean-clone run of
the suite the last three were 0.50, 0.56, 0.55 (passed), 8 min with the SFT; the
benchmark's three seeds +0.31, +0.23, +0.31 (docs/benchmarks.md).

Not asserted here, because single runs on this budget were not reliable (docs/rl.md): GRPO
on the flow policy (3 benchmark seeds +0.20 to +0.26 by the last three evaluations, but about
+0.1 in the suite's run) and token-level PPO on the AR policy (+0.16, +0.20 on two benchmark
seeds and +0.31 in one run of this file, but +0.05 in the suite's run).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from embodied.collect import collect_demos
from embodied.config import load_config
from embodied.lerobot import LeRobotDataset
from embodied.sft import build_policy, load_sft_config, train_sft
from embodied.train import train

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.fixture(scope="module")
def pushcube_demos(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    data = tmp_path_factory.mktemp("rl_pushcube") / "data"
    collect_demos("PushCube", 200, data, seed=100_000, obs_mode="rgb", image_size=64,
                  cameras=["front", "wrist"], noise=0.3)
    return data


def _few_shot_sft(config: str, data: Path, run_dir: Path) -> Path:
    cfg = load_sft_config(CONFIGS / config, [f"dataset={data}", f"run_dir={run_dir}", "eval_every=0", "seed=0"])
    dataset = LeRobotDataset(cfg.dataset, chunk_size=cfg.chunk_size)
    torch.manual_seed(0)
    summary = train_sft(build_policy(cfg, dataset.stats), dataset, cfg, None, log=lambda _: None)
    return Path(summary["final"])


@pytest.fixture(scope="module")
def sft_flow(pushcube_demos) -> Path:
    return _few_shot_sft("sft_pushcube_flow_fewshot.yaml", pushcube_demos, pushcube_demos.parent / "sft_flow")


def _lift(config: str, sft: Path, run_dir: Path, steps: int, episodes: int) -> tuple[float, list[float], float]:
    """RL from `sft`: (success before, eval curve, mean of the last three evaluations)."""
    cfg = load_config(CONFIGS / config, [
        f"policy.init_from={sft}", f"train.run_dir={run_dir}", f"train.total_steps={steps}", "train.seed=0",
        "train.eval_every=5", f"train.eval_episodes={episodes}", "train.video_episodes=0", "train.save_every=0",
        "train.progress=false"])
    summary = train(cfg)
    curve = [rate for _, rate in summary["eval_curve"]]
    late = sum(curve[-3:]) / 3
    print(f"{config}: success {summary['success_before']:.2f} after SFT; curve {curve} (last three {late:.2f})")
    assert summary["success_before"] < 0.6 and len(curve) >= 6  # few-shot: room to improve; evaluated
    return summary["success_before"], curve, late


@pytest.mark.slow
def test_ppo_flow_noise_lifts_few_shot_pushcube(sft_flow, tmp_path):
    before, curve, late = _lift("rl_pushcube_flow_noise.yaml", sft_flow, tmp_path, 100_000, 100)
    assert late >= before + 0.20, curve

