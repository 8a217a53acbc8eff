"""End-to-end learning: state-PPO must solve PushCube (seeded, 2 CPU cores). Reach, which it
solves in 120k env steps (`embodied train configs/ppo/ppo_reach.yaml`), left the suite for its
budget: PushCube is the harder check of the same loop.

The assertions are on the success rate of the final deterministic evaluation
over 64 fixed seeds that training never saw.
"""

import pytest

from embodied.config import load_config
from embodied.rl.train import train

pytestmark = pytest.mark.slow


def run(tmp_path, config, *overrides):
    cfg = load_config(config, [f"train.run_dir={tmp_path}", "train.progress=false", "train.eval_every=0",
                               "train.video_episodes=0", "train.eval_episodes=64", *overrides])
    return train(cfg)


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
def test_ppo_solves_pushcube(tmp_path):
    """The recipe (reward scaling, 5 epochs x 8 minibatches) at 200k env steps. Final success
    of `embodied train configs/ppo/ppo_pushcube.yaml train.total_steps=200000 train.seed=S
    train.eval_every=0` for S = 0-4 (2026-11-24, commit 63c4870, five runs at once on the
    2-core machine): 1.00, 0.97, 1.00, 0.91, 0.97. At 300k they were 0.97-1.00 (commit fe19479);
    it first passes 0.9 at 123k-205k steps (docs/rl.md). The threshold, 0.8, sits below the
    worst of the five."""
    summary = run(tmp_path, "configs/ppo/ppo_pushcube.yaml", "train.total_steps=200000")
    assert summary["success_before"] < 0.2
    assert summary["success_after"] >= 0.8, summary
