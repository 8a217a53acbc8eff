"""Learning: PPO with Flow-Noise lifts a few-shot SFT flow VLA, from pixels, in the simulator.

The recipe is configs/sft_reach_flow_fewshot.yaml (here with 500 SFT steps instead of 1000,
for more room) then configs/rl_reach_flow_noise.yaml: 100 expert demos of Reach (front and
wrist cameras, DART noise 0.3), then PPO with Flow-Noise exploration and a privileged-state
critic for 100k env steps, evaluated every 5 iterations on 100 held-out seeds (deterministic,
the same seeds each time). The test asserts that the mean of the last three evaluations is
at least 8 points above the SFT policy's success: a single final evaluation moves by 5-10
points from one evaluation to the next, and the run itself varies between processes.

Measured on 2 CPU cores (2026-11-22): from 500 SFT steps 0.29 -> 0.53, 0.50, 0.45 (mean of
the last three +0.20), 7 min. From 700 SFT steps three runs gave 0.40 -> 0.60, 0.39 -> 0.64
(last three +0.16) and 0.47 -> 0.54 (final only); the recipe's runs 0.43 -> 0.62-0.64
(docs/rl.md, "Measured").

The issue's target (at least 20 points on PushCube) is not met: see docs/rl.md.
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
def sft_reach(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("rl_reach")
    collect_demos("Reach", 100, root / "data", seed=0, obs_mode="rgb", image_size=64,
                  cameras=["front", "wrist"], noise=0.3)
    cfg = load_sft_config(CONFIGS / "sft_reach_flow_fewshot.yaml",
                          [f"dataset={root / 'data'}", f"run_dir={root / 'sft'}", "eval_every=0", "steps=500"])
    dataset = LeRobotDataset(cfg.dataset, chunk_size=cfg.chunk_size)
    torch.manual_seed(cfg.seed)
    summary = train_sft(build_policy(cfg, dataset.stats), dataset, cfg, None, log=lambda _: None)
    return Path(summary["final"])


@pytest.mark.slow
def test_ppo_flow_noise_lifts_few_shot_reach(sft_reach, tmp_path):
    cfg = load_config(CONFIGS / "rl_reach_flow_noise.yaml", [
        f"policy.init_from={sft_reach}", f"train.run_dir={tmp_path / 'rl'}", "train.total_steps=100000",
        "train.eval_every=5", "train.eval_episodes=100", "train.video_episodes=0", "train.save_every=0",
        "train.progress=false"])
    summary = train(cfg)
    before = summary["success_before"]
    curve = [rate for _, rate in summary["eval_curve"]]
    late = sum(curve[-3:]) / 3
    print(f"Reach from pixels: success {before:.2f} after SFT; PPO with Flow-Noise: {curve} (last three {late:.2f})")
    assert before < 0.8 and len(curve) >= 6  # few-shot: room to improve; the curve was evaluated
    assert late >= before + 0.08, summary
