"""Reach: move the gripper's TCP to a randomised point shown by a marker sphere on a pole.

The sphere (4 cm across, visual only) stands on a thin visual pole that goes down into the
table: where the pole meets the table shows the goal's position over the table, and the
pole's length its height, so the goal is observable from the front camera alone.

Success: TCP within 2.5 cm of the goal. No failure. 50 control steps.
Progress (see base.py for the rewards made of it): 1 - tanh(10 * distance).
"""

from __future__ import annotations

import numpy as np

from sims.mujoco.control import expert_action
from sims.mujoco.handles import SimView
from sims.mujoco.scene import SceneOptions
from sims.mujoco.tasks.base import (REACH_DIFFERENCES, REACH_LAYOUT, REACH_PRIV_DIM, Episode, Task, empty_like_rows,
                                   falses, norm, shaped, state_obs)
from sims.mujoco.tasks.registry import register_task

SUCCESS_RADIUS = 0.025


@register_task("Reach")
class Reach(Task):
    max_episode_steps = 50
    privileged_dim = REACH_PRIV_DIM
    layout = REACH_LAYOUT
    differences = REACH_DIFFERENCES
    scene = SceneOptions(cube=False, markers=("sphere",), pole=True, sphere_radius=0.02,
                         goal_rgba=(0.1, 0.9, 0.2, 1.0))

    def sample_episode(self, rng: np.random.Generator, n: int) -> Episode:
        tcp = np.stack([rng.uniform(-0.05, 0.05, n), rng.uniform(-0.05, 0.05, n),
                        rng.uniform(0.12, 0.18, n)], axis=1)
        goal = np.stack([rng.uniform(-0.15, 0.15, n), rng.uniform(-0.15, 0.15, n),
                         rng.uniform(0.04, 0.25, n)], axis=1)
        return {"tcp": tcp, "gap": np.full(n, 0.09), "goal": goal}

    def instruction(self, ep: Episode, i: int) -> str:
        return "move the gripper to the target"

    def evaluate(self, s: SimView, ep: Episode) -> dict[str, np.ndarray]:
        dist = norm(s.goal - s.tcp)
        return {"success": dist < SUCCESS_RADIUS, "fail": falses(dist),
                "dist_to_goal": dist}

    def progress(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        return shaped(ev["dist_to_goal"])

    def privileged(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        out = empty_like_rows(s.tcp, REACH_PRIV_DIM)
        out[:, :9] = state_obs(s)
        out[:, 9:12] = s.goal
        out[:, 12:15] = s.goal - s.tcp
        return out

    @staticmethod
    def expert(priv: np.ndarray) -> np.ndarray:
        """Straight line to the goal at full speed, gripper open."""
        return expert_action(priv[:, REACH_LAYOUT["goal_minus_tcp"]], -1.0)
