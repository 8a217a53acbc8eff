"""PickCube: grasp a coloured cube and lift it to a randomised goal point (a floating sphere).

Success: cube centre within 2.5 cm of the goal while grasped. Failure: the cube leaves the
table. 75 control steps.
Progress (in [0, 1], see base.py for the rewards made of it): (reach + grasped + 2 * goal *
grasped) / 4, where reach rewards the TCP's closeness to the cube and goal the cube's closeness to the goal point.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

from sims.mujoco.control import expert_action
from sims.mujoco.handles import SimView
from sims.mujoco.scene import COLOR_NAMES, CUBE_HALF, SceneOptions
from sims.mujoco.tasks.base import (
    CUBE_DIFFERENCES,
    CUBE_LAYOUT,
    CUBE_PRIV_DIM,
    Episode,
    Task,
    cube_privileged,
    norm,
    off_table,
    shaped,
    yaw_quat,
)
from sims.mujoco.tasks.grasping import grasp_routine, is_grasped
from sims.mujoco.tasks.registry import register_task

SUCCESS_RADIUS = 0.025


@register_task("PickCube")
class PickCube(Task):
    max_episode_steps = 75
    privileged_dim = CUBE_PRIV_DIM
    layout = CUBE_LAYOUT
    differences = CUBE_DIFFERENCES
    unit_quaternions = ("cube_quat",)
    scene = SceneOptions(cube=True, markers=("sphere",))

    def sample_episode(self, rng: np.random.Generator, n: int) -> Episode:
        cube = np.stack([rng.uniform(-0.1, 0.1, n), rng.uniform(-0.1, 0.1, n),
                         np.full(n, CUBE_HALF)], axis=1)
        goal = np.stack([rng.uniform(-0.1, 0.1, n), rng.uniform(-0.1, 0.1, n),
                         rng.uniform(0.08, 0.2, n)], axis=1)
        tcp = np.stack([rng.uniform(-0.05, 0.05, n), rng.uniform(-0.05, 0.05, n),
                        rng.uniform(0.12, 0.18, n)], axis=1)
        return {
            "tcp": tcp,
            "gap": np.full(n, 0.09),
            "cube_pos": cube,
            "cube_quat": yaw_quat(rng.uniform(-0.3, 0.3, n)),
            "goal": goal,
            "cube_color": rng.integers(0, len(COLOR_NAMES), n),
        }

    def instruction(self, ep: Episode, i: int) -> str:
        return f"pick up the {COLOR_NAMES[ep['cube_color'][i]]} cube and lift it"

    def evaluate(self, s: SimView, ep: Episode) -> dict[str, np.ndarray]:
        grasped = is_grasped(s)
        dist = norm(s.goal - s.cube)
        return {"success": (dist < SUCCESS_RADIUS) & grasped, "fail": off_table(s.cube),
                "grasped": grasped, "dist_to_goal": dist}

    def progress(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        g = array_namespace(s.tcp).astype(ev["grasped"], s.tcp.dtype)
        reach = shaped(norm(s.cube - s.tcp))
        return (reach + g + 2.0 * g * shaped(ev["dist_to_goal"])) / 4.0

    def privileged(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        return cube_privileged(s, s.goal, ev["grasped"])

    @staticmethod
    def expert(priv: np.ndarray) -> np.ndarray:
        """Grasp from above, then carry the cube straight to the goal."""
        L = CUBE_LAYOUT
        delta, grip = grasp_routine(priv)
        held = priv[:, L["grasped"]][:, 0] > 0.5
        carry = priv[:, L["goal_minus_cube"]]
        delta = np.where(held[:, None], carry, delta)
        grip = np.where(held, 1.0, grip)
        return expert_action(delta, grip)
