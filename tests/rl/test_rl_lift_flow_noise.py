"""Learning: PPO with Flow-Noise lifts a short SFT of the tiny flow VLA on Reach, from pixels.

configs/lift/lift_reach_flow_noise.yaml with seed 0 (tests/rl_lift.py): 50 demos of a slow
expert, 400 SFT steps, then 36k env steps of PPO with Flow-Noise on Reach from 32x32 front
and wrist cameras; asserts the mean of the last two evaluations (64 held-out seeds,
deterministic policy) minus the SFT policy's success. About 3 minutes on one core.

The threshold sits below the worst of 5 seeds of `benchmarks/bench_learning_tests.py
lift_reach_flow_noise` (2026-11-23, 2-core AMD EPYC machine; docs/benchmarks.md, "Learning
tests"): SFT -> last two, per seed 0-4: 0.56 -> 0.71,
0.47 -> 0.52, 0.45 -> 0.51, 0.30 -> 0.38, 0.39 -> 0.54; lifts +0.148, +0.055, +0.055, +0.078,
+0.148 (worst +0.055, mean +0.10). Seed 0, the test's, gave +0.15.
"""

from __future__ import annotations

import pytest
from rl_lift import lift, sparse_eval


@pytest.mark.slow
@pytest.mark.scale  # about 3 min: `make bench-scale`, not `make test`
def test_ppo_flow_noise_lifts_a_short_sft_on_reach(build_once, tmp_path):
    # evaluated at iteration 18 and the last (23): where the config's last two evaluations fall
    out = lift("lift_reach_flow_noise", 0, tmp_path, build_once, overrides=sparse_eval(18))
    assert out["before"] < 0.8 and len(out["curve"]) >= 3  # room to improve; evaluated along the way
    assert out["lift"] >= 0.03, out
