"""PushCube: push a coloured cube onto a target square 10-15 cm in front of it (+x).

Success: cube centre within 2.5 cm of the square's centre in xy, cube on the table.
Failure: the cube leaves the table. 50 control steps.
Progress (in [0, 1], see base.py for the rewards made of it): (reach + 2 * place) / 3, where
reach rewards the
pushing finger's outer face being just behind the cube on the line to the target, at cube
height, and place rewards the cube's closeness to the target.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

from sims.mujoco.control import expert_action
from sims.mujoco.handles import SimView
from sims.mujoco.scene import COLOR_NAMES, CUBE_HALF, FINGER_HALF, SceneOptions
from sims.mujoco.tasks.base import (
    CUBE_DIFFERENCES,
    CUBE_LAYOUT,
    CUBE_PRIV_DIM,
    Episode,
    Task,
    copy,
    cube_privileged,
    falses,
    norm,
    off_table,
    shaped,
    two_colors,
    yaw_quat,
)
from sims.mujoco.tasks.registry import register_task

SUCCESS_RADIUS = 0.025
FINGER_THICK = 2 * FINGER_HALF[0]


def _unit_xy(v: np.ndarray) -> np.ndarray:
    """[n, >=2] -> unit xy directions [n, 2] (numpy or torch)."""
    xy = v[:, :2]
    return xy / array_namespace(v).clip(norm(xy)[:, None], min=1e-6)


@register_task("PushCube")
class PushCube(Task):
    max_episode_steps = 50
    privileged_dim = CUBE_PRIV_DIM
    layout = CUBE_LAYOUT
    differences = CUBE_DIFFERENCES
    unit_quaternions = ("cube_quat",)
    scene = SceneOptions(cube=True, markers=("square",))

    def sample_episode(self, rng: np.random.Generator, n: int) -> Episode:
        cube = np.stack([rng.uniform(-0.12, -0.02, n), rng.uniform(-0.05, 0.05, n),
                         np.full(n, CUBE_HALF)], axis=1)
        target = cube + np.stack([rng.uniform(0.10, 0.15, n), rng.uniform(-0.02, 0.02, n),
                                  np.zeros(n)], axis=1)
        target[:, 2] = 0.0
        tcp = np.stack([rng.uniform(-0.22, -0.18, n), rng.uniform(-0.03, 0.03, n),
                        rng.uniform(0.06, 0.08, n)], axis=1)
        cube_color, target_color = two_colors(rng, n)
        return {
            "tcp": tcp,
            "gap": np.zeros(n),
            "cube_pos": cube,
            "cube_quat": yaw_quat(rng.uniform(-0.26, 0.26, n)),
            "target": target,
            "cube_color": cube_color,
            "target_color": target_color,
        }

    def instruction(self, ep: Episode, i: int) -> str:
        cube, square = COLOR_NAMES[ep["cube_color"][i]], COLOR_NAMES[ep["target_color"][i]]
        return f"push the {cube} cube onto the {square} square"

    def evaluate(self, s: SimView, ep: Episode) -> dict[str, np.ndarray]:
        dist = norm(s.cube[:, :2] - s.target[:, :2])
        on_table = s.cube[:, 2] < CUBE_HALF + 0.01
        return {"success": (dist < SUCCESS_RADIUS) & on_table, "fail": off_table(s.cube),
                "dist_to_goal": dist}

    def progress(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        u = _unit_xy(s.target - s.cube)
        behind = s.cube[:, :2] - u * (CUBE_HALF + 0.005)
        pusher = copy(s.tcp[:, :2])
        pusher[:, 0] += s.gap / 2 + FINGER_THICK  # outer face of the +x finger
        d_xy = norm(pusher - behind)
        d_reach = array_namespace(d_xy).sqrt(d_xy**2 + (s.tcp[:, 2] - s.cube[:, 2]) ** 2)
        return (shaped(d_reach) + 2.0 * shaped(ev["dist_to_goal"])) / 3.0

    def privileged(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        goal = copy(s.target)
        goal[:, 2] = CUBE_HALF
        return cube_privileged(s, goal, falses(s.tcp))

    @staticmethod
    def expert(priv: np.ndarray) -> np.ndarray:
        """Close the gripper, get behind the cube on the cube->target line, push along it."""
        L = CUBE_LAYOUT
        tcp, cube, goal = priv[:, L["tcp"]], priv[:, L["cube"]], priv[:, L["goal"]]
        u = _unit_xy(goal - cube)
        rel = cube[:, :2] - tcp[:, :2]
        along = np.sum(rel * u, axis=1)  # how far the cube is ahead of the tcp
        lateral = rel - along[:, None] * u  # tcp's offset from the push line
        contact = CUBE_HALF + FINGER_THICK  # tcp-to-cube distance when the closed fingers touch
        aligned = (np.linalg.norm(lateral, axis=1) < 0.012) & (along > contact - 0.008)
        low = tcp[:, 2] < CUBE_HALF + 0.008

        pre = cube[:, :2] - u * (contact + 0.012)
        dest = np.empty_like(tcp)
        # Not lined up: go above the pre-push point (high if we might hit the cube), then down.
        near_pre = np.linalg.norm(pre - tcp[:, :2], axis=1) < 0.012
        dest[:, :2] = pre
        dest[:, 2] = np.where(near_pre, CUBE_HALF, 0.07)
        # Lined up and low: push along u, slowing down near the goal so the cube doesn't overshoot.
        remaining = np.linalg.norm(goal[:, :2] - cube[:, :2], axis=1)
        push = aligned & low
        step = np.clip(remaining * 0.8, 0.004, 0.02)
        push_dest = tcp[:, :2] + u * step[:, None] + lateral
        dest[:, :2] = np.where(push[:, None], push_dest, dest[:, :2])
        dest[:, 2] = np.where(push, CUBE_HALF, dest[:, 2])
        return expert_action(dest - tcp, 1.0)
