"""The task's own success, failure and progress, computed from a (decoded) privileged vector.

With reward_mode "task", a world model env scores its predicted states with these instead of
its learned heads: reward = P(x') - P(x) + 1[success(x')], the simulator's "dense" reward
(sims/mujoco/tasks/base.py), and the episode terminates on success or failure of the decoded
state. A learned head can be pushed to fire on states the data never reached; these functions
can only be fooled through the dynamics. tests/world_model/test_world_model_task_terms.py checks them
against the simulator's rewards and flags.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

Terms = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


def push_cube(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PushCube from privileged vectors [n, 32]: (progress [n] in [0, 1], success [n], fail [n]);
    the same formulas as sims/mujoco/tasks/push_cube.py, on the vector's fields."""
    from sims.mujoco.scene import CUBE_HALF, TABLE_HALF
    from sims.mujoco.tasks.base import CUBE_LAYOUT as L
    from sims.mujoco.tasks.base import shaped
    from sims.mujoco.tasks.push_cube import FINGER_THICK, SUCCESS_RADIUS, _unit_xy

    tcp, cube, goal, gap = x[:, L["tcp"]], x[:, L["cube"]], x[:, L["goal"]], x[:, L["gap"]][:, 0]
    dist = np.linalg.norm(cube[:, :2] - goal[:, :2], axis=1)
    success = (dist < SUCCESS_RADIUS) & (cube[:, 2] < CUBE_HALF + 0.01)
    fail = (np.abs(cube[:, 0]) > TABLE_HALF[0]) | (np.abs(cube[:, 1]) > TABLE_HALF[1])
    u = _unit_xy(goal - cube)
    behind = cube[:, :2] - u * (CUBE_HALF + 0.005)
    pusher = tcp[:, :2].copy()
    pusher[:, 0] += gap / 2 + FINGER_THICK  # outer face of the +x finger
    d_xy = np.linalg.norm(pusher - behind, axis=1)
    d_reach = np.sqrt(d_xy**2 + (tcp[:, 2] - cube[:, 2]) ** 2)
    progress = (shaped(d_reach) + 2.0 * shaped(dist)) / 3.0
    return progress, success, fail


TERMS: dict[str, Terms] = {"PushCube": push_cube}
