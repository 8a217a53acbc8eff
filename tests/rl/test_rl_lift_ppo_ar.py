"""Learning: token-level PPO lifts the autoregressive VLA imitated from a slow demonstrator on
ReachPoint, from pixels.

configs/lift/lift_point_ppo_ar.yaml with seed 0 (tests/rl_lift.py): 50 demos of the expert at 0.5x
speed on ReachPoint (32x32 front and wrist cameras, DART noise 0.3), 1500 SFT steps of the tiny
AR VLA (256 bins per action dimension, labels smoothed over 2 bins), then 15k env steps of PPO
with a privileged-state critic and token-level ratios, sampling the action tokens at
temperature 0.3. The success is that of the policy as it samples (train.eval_deterministic:
false; 64 held-out seeds, draws seeded): the policy PPO optimises. The argmax decode of this
tiny model is a different policy (it starts at about 0.5 where sampling starts below 0.2) and
PPO moves it little and unevenly (docs/rl.md, "Token PPO on the small AR VLA").

The threshold sits below the worst of 5 seeds of `benchmarks/bench_learning_tests.py
lift_point_ppo_ar` (2026-11-24, 2-core AMD EPYC machine, commit 79b1989 with the 15k budget;
docs/benchmarks.md, "Learning tests"): SFT -> last two, per seed 0-4: 0.16 -> 0.30,
0.06 -> 0.31, 0.06 -> 0.19, 0.03 -> 0.45, 0.02 -> 0.31; lifts +0.148, +0.250, +0.125, +0.422,
+0.297 (worst +0.12, mean +0.25). Seed 0, the test's, gave +0.15. The threshold, +0.06, is
half the worst: other CPUs give other numbers for the same seed. (At 24k env steps the lifts
were +0.14 to +0.48; the budget was cut for the suite's time.)
"""

from __future__ import annotations

import pytest
from rl_lift import lift, sparse_eval


@pytest.mark.slow
@pytest.mark.scale  # about 2.5 min: `make bench-scale`, not `make test`
def test_token_ppo_lifts_the_ar_vla(build_once, tmp_path):
    # evaluated at iteration 32 and the last (40): where the config's last two evaluations fall
    out = lift("lift_point_ppo_ar", 0, tmp_path, build_once, overrides=sparse_eval(32))
    assert out["before"] < 0.5 and len(out["curve"]) >= 3  # room to improve; evaluated along the way
    assert out["lift"] >= 0.06, out
