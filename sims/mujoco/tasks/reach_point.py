"""ReachPoint: reach one fixed point within 12 control steps, a task on which RL beats its
demonstrations quickly.

The goal sphere always stands at GOAL; only the gripper's start is drawn (as in Reach: within
±5 cm in x and y, 12-18 cm high, so 10-20 cm from the goal). The policy needs no perception of
the goal, only of its own state. The time limit is what makes the task: the scripted expert
at full speed (2 cm per step, then a proportional approach) succeeds on every start, while a
slow demonstrator succeeds rarely (expert at 0.3x speed: 17% of 256 starts, at 0.4x: 55%,
at 0.5x: 85%; tests/sims/test_sims_experts.py). A policy imitated from slow demonstrations is slow
too, and RL has a clear, state-independent improvement to find: move faster, then stop on the
point. That is the mechanism the suite's RL learning checks (tests/rl/test_rl_lift_*.py) and
`make demo` exercise at a scale a 2-core CPU affords; the variable-goal Reach adds the
perception of the goal from pixels, which RL improves only slowly on a CPU (docs/rl.md,
"The pipeline (`make demo`)").

Success: TCP within 2.5 cm of GOAL. No failure. 12 control steps. The same observations,
privileged layout, reward and expert as Reach.
"""

from __future__ import annotations

import numpy as np

from sims.mujoco.tasks.base import Episode
from sims.mujoco.tasks.reach import Reach
from sims.mujoco.tasks.registry import register_task

GOAL = (0.10, -0.08, 0.08)  # m, world frame


@register_task("ReachPoint")
class ReachPoint(Reach):
    max_episode_steps = 12

    def sample_episode(self, rng: np.random.Generator, n: int) -> Episode:
        ep = super().sample_episode(rng, n)  # the same draws as Reach, so seeds stay comparable
        ep["goal"] = np.tile(np.asarray(GOAL, float), (n, 1))
        return ep
