"""Learning: GRPO lifts a few-shot SFT flow VLA on PushCube, from pixels, with no critic.

rl_pushcube_grpo_flow.yaml (groups of 8 envs sharing a reset seed, the shaped episode return
normalised within each group, every group kept, Flow-Noise exploration, no critic) for 150k
env steps from the few-shot flow SFT of tests/rl_lift.py, shared with the Flow-Noise PPO
test; asserts that the mean of the last three evaluations is at least 15 points above the
SFT policy.

Measured on 2 CPU cores (2026-11-22): a run of this test went 0.12 -> 0.50, 0.49, 0.53
(+0.39); runs of the recipe from other SFT starts +0.24 (0.19, train seed 1) and +0.29
(0.26, seed 2); docs/rl.md. 10-12 minutes with the shared SFT.
"""

from __future__ import annotations

import pytest
from rl_lift import few_shot_sft, rl_lift


@pytest.mark.slow
def test_grpo_flow_lifts_few_shot_pushcube(build_once, tmp_path):
    before, curve, late = rl_lift("rl_pushcube_grpo_flow.yaml", few_shot_sft(build_once, "flow"), tmp_path, 150_000)
    assert late >= before + 0.15, curve
