"""Learning: GRPO lifts a flow VLA imitated from a slow demonstrator on ReachPoint, from pixels.

configs/lift/lift_point_grpo_flow.yaml with seed 0 (tests/rl_lift.py): 50 demos of the expert at
0.3x speed on ReachPoint (a fixed point within 12 steps; `collect` keeps the successful
attempts, 17% at that speed, which start nearest the point), 400
SFT steps of the tiny flow VLA, then 16k env steps of GRPO with Flow-Noise (groups of 8 envs
from one reset seed, shaped returns normalised in the group, no critic) from 32x32 front and
wrist cameras; asserts the mean of the last two evaluations (64 held-out seeds, deterministic
policy) minus the SFT policy's success.

The threshold sits below the worst of 5 seeds of `benchmarks/bench_learning_tests.py
lift_point_grpo_flow` (2026-11-24, 2-core AMD EPYC machine, commit 79b1989 with the 16k budget;
docs/benchmarks.md, "Learning tests"): SFT -> last two, per seed 0-4: 0.09 -> 0.32,
0.11 -> 0.31, 0.09 -> 0.34, 0.09 -> 0.34, 0.09 -> 0.30; lifts +0.234, +0.203, +0.242, +0.242,
+0.211 (worst +0.20, mean +0.23). Seed 0, the test's, gave +0.23. The threshold, +0.10, is half
the worst: other CPUs give other numbers for the same seed. (At 24k env steps the lifts were
+0.28 to +0.36; the budget was cut for the suite's time.)
"""

from __future__ import annotations

import pytest
from rl_lift import lift, sparse_eval


@pytest.mark.slow
def test_grpo_lifts_an_imitation_of_a_slow_demonstrator(build_once, tmp_path):
    # evaluated at iteration 40 and the last (43): where the config's last two evaluations fall
    out = lift("lift_point_grpo_flow", 0, tmp_path, build_once, overrides=sparse_eval(40))
    assert out["before"] < 0.5 and len(out["curve"]) >= 3  # room to improve; evaluated along the way
    assert out["lift"] >= 0.10, out
