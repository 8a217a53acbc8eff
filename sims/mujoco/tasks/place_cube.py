"""PlaceCube: pick up a coloured cube and place it on a target square of another colour.

Success: the cube rests on the square (centre within 2.5 cm in xy, on the table, slow) and
has been released (fingers apart). Failure: the cube leaves the table. 100 control steps.
Progress (in [0, 1], see base.py for the rewards made of it), staged: reach the cube, grasp it, bring it to its
resting pose on the square, open the gripper once it is there.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

from sims.mujoco.control import expert_action
from sims.mujoco.handles import SimView
from sims.mujoco.scene import COLOR_NAMES, CUBE_HALF, FINGER_MAX, SceneOptions
from sims.mujoco.tasks.base import (
    CUBE_DIFFERENCES,
    CUBE_LAYOUT,
    CUBE_PRIV_DIM,
    Episode,
    Task,
    copy,
    cube_privileged,
    norm,
    off_table,
    shaped,
    two_colors,
    yaw_quat,
)
from sims.mujoco.tasks.grasping import grasp_routine, is_grasped
from sims.mujoco.tasks.registry import register_task

SUCCESS_RADIUS = 0.025
CARRY = 0.05  # height of the cube above its resting pose while carried over (m)


def _rest(target: np.ndarray) -> np.ndarray:
    """Cube centre resting on the square [n, 3]."""
    rest = copy(target)
    rest[:, 2] = CUBE_HALF
    return rest


@register_task("PlaceCube")
class PlaceCube(Task):
    max_episode_steps = 100
    privileged_dim = CUBE_PRIV_DIM
    layout = CUBE_LAYOUT
    differences = CUBE_DIFFERENCES
    unit_quaternions = ("cube_quat",)
    scene = SceneOptions(cube=True, markers=("square",))

    def sample_episode(self, rng: np.random.Generator, n: int) -> Episode:
        cube = np.stack([rng.uniform(-0.1, 0.1, n), rng.uniform(-0.1, 0.1, n),
                         np.full(n, CUBE_HALF)], axis=1)
        angle, radius = rng.uniform(-np.pi, np.pi, n), rng.uniform(0.1, 0.16, n)
        target = np.zeros((n, 3))
        target[:, 0] = np.clip(cube[:, 0] + radius * np.cos(angle), -0.17, 0.17)
        target[:, 1] = np.clip(cube[:, 1] + radius * np.sin(angle), -0.14, 0.14)
        tcp = np.stack([rng.uniform(-0.05, 0.05, n), rng.uniform(-0.05, 0.05, n),
                        rng.uniform(0.12, 0.18, n)], axis=1)
        cube_color, target_color = two_colors(rng, n)
        return {
            "tcp": tcp,
            "gap": np.full(n, 2 * FINGER_MAX),
            "cube_pos": cube,
            "cube_quat": yaw_quat(rng.uniform(-0.3, 0.3, n)),
            "target": target,
            "cube_color": cube_color,
            "target_color": target_color,
        }

    def instruction(self, ep: Episode, i: int) -> str:
        cube, square = COLOR_NAMES[ep["cube_color"][i]], COLOR_NAMES[ep["target_color"][i]]
        return f"place the {cube} cube on the {square} square"

    def evaluate(self, s: SimView, ep: Episode) -> dict[str, np.ndarray]:
        grasped = is_grasped(s)
        dist = norm(s.cube[:, :2] - s.target[:, :2])
        placed = (dist < SUCCESS_RADIUS) & (s.cube[:, 2] < CUBE_HALF + 0.005)
        released = (s.gap > 2 * CUBE_HALF + 0.01) & ~grasped
        still = norm(s.cube_vel) < 0.05
        return {"success": placed & released & still, "fail": off_table(s.cube),
                "grasped": grasped, "placed": placed,
                "dist_to_goal": norm(s.cube - _rest(s.target))}

    def progress(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        xp = array_namespace(s.tcp)
        placed = ev["placed"]
        g = ev["grasped"]
        reach = xp.where(placed, 1.0, shaped(norm(s.cube - s.tcp)))
        grasp = xp.astype(g | placed, s.tcp.dtype)
        place = shaped(ev["dist_to_goal"]) * grasp
        release = xp.astype(placed, s.tcp.dtype) * xp.clip(s.gap / (2 * FINGER_MAX), min=0.0, max=1.0)
        return (reach + grasp + 2.0 * place + release) / 5.0

    def privileged(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        return cube_privileged(s, _rest(s.target), ev["grasped"])

    @staticmethod
    def expert(priv: np.ndarray) -> np.ndarray:
        """Grasp from above, carry over the square, lower, open, back off upwards."""
        L = CUBE_LAYOUT
        delta, grip = grasp_routine(priv)
        held = priv[:, L["grasped"]][:, 0] > 0.5
        to_goal = priv[:, L["goal_minus_cube"]]  # goal = the cube's resting pose
        over = np.linalg.norm(to_goal[:, :2], axis=1) < 0.008
        carry = to_goal.copy()
        carry[:, 2] = np.where(over, to_goal[:, 2], to_goal[:, 2] + CARRY)
        # Lowered onto the square: open. Not held but on the square: open and back off upwards.
        down = over & (np.abs(to_goal[:, 2]) < 0.004)
        on_square = ~held & (np.linalg.norm(to_goal, axis=1) < 0.015)
        delta = np.where(held[:, None], carry, delta)
        grip = np.where(held, np.where(down, -1.0, 1.0), grip)
        up = np.zeros_like(delta)
        up[:, 2] = 0.02
        delta = np.where(on_square[:, None], up, delta)
        grip = np.where(on_square, -1.0, grip)
        return expert_action(delta, grip)
