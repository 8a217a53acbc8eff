"""Learning: Flow-SDE exploration lifts a flow VLA imitated from a slow demonstrator on
ReachPoint, from pixels.

configs/lift/lift_point_flow_sde.yaml with seed 0 (tests/rl_lift.py): the demos and SFT of
configs/lift/lift_point_grpo_flow.yaml (built once per session), then 16k env steps with Flow-SDE
exploration (one stochastic denoising step per chunk, a = 0.5; its log-probability is the
Gaussian transition of that step) and the clipped-ratio update on group-relative advantages.
The advantages come from groups rather than a critic because on this task PPO's critic gave no
lift at this budget with either exploration (docs/rl.md, "Why the small checks use group
advantages"); the mechanism under test is Flow-SDE's likelihood in the clipped update.

The threshold sits below the worst of 5 seeds of `benchmarks/bench_learning_tests.py
lift_point_flow_sde` (2026-11-24, 2-core AMD EPYC machine, commit 79b1989 with the 16k budget;
docs/benchmarks.md, "Learning tests"): SFT -> last two, per seed 0-4: 0.09 -> 0.25,
0.11 -> 0.27, 0.09 -> 0.27, 0.09 -> 0.26, 0.09 -> 0.22; lifts +0.156, +0.156, +0.180, +0.164,
+0.125 (worst +0.12, mean +0.16). Seed 0, the test's, gave +0.16. The threshold, +0.06, is
half the worst: other CPUs give other numbers for the same seed. (At 24k env steps the lifts were
+0.16 to +0.27; the budget was cut for the suite's time.)
"""

from __future__ import annotations

import pytest
from rl_lift import lift, sparse_eval


@pytest.mark.slow
@pytest.mark.scale  # about 1.5 min: `make bench-scale`, not `make test`
def test_flow_sde_lifts_an_imitation_of_a_slow_demonstrator(build_once, tmp_path):
    # evaluated at iteration 40 and the last (43): where the config's last two evaluations fall
    out = lift("lift_point_flow_sde", 0, tmp_path, build_once, overrides=sparse_eval(40))
    assert out["before"] < 0.5 and len(out["curve"]) >= 3
    assert out["lift"] >= 0.06, out
