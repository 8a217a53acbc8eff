"""ReachColor: two goal spheres on poles, a red one and a blue one; the instruction names one.

"reach the red target" / "reach the blue target": only the instruction says which sphere is the
goal, so a policy must read it (chance, picking a sphere at random, is 50%).
Success: TCP within 2.5 cm of the named sphere. Failure: TCP within 2.5 cm of the other one.
50 control steps. Progress (see base.py for the rewards made of it): 1 - tanh(10 * distance
to the named sphere).

Layout: the red sphere left of the start (x in [-12, -8] cm), the blue one right of it (x in
[8, 12] cm), y in ±5 cm, z in 8-12 cm; the spheres are at least 15 cm apart and the straight
path to either passes the other at 5 cm or more. Red is always on the left: the task tests
that the policy follows the instruction (the scene alone does not say which sphere to reach),
not that it finds a colour anywhere in the image. Measured with the colours' sides drawn per
episode, the tiny VLA learned to pair colour word and sphere in only 1 of 5 SFT runs of
1500-3000 steps (docs/vla.md), too slow and too unreliable for a test; with fixed sides 2000
steps reached 96%.

Scene: the red sphere is the mocap body "goal", the blue one the mocap body "target" (so
SimView.goal / SimView.target are the red / blue centres); both stand on visual poles.
The episode variable "named" (int [n]: 0 red, 1 blue) says which one the instruction names.
"""

from __future__ import annotations

import numpy as np

from sims.mujoco.handles import SimView
from sims.mujoco.scene import PALETTE, SceneOptions
from array_api_compat import array_namespace

from sims.mujoco.tasks.base import REACH_DIFFERENCES, REACH_LAYOUT, Episode, Task, empty_like_rows, norm, shaped, state_obs
from sims.mujoco.tasks.reach import Reach
from sims.mujoco.tasks.registry import register_task

SUCCESS_RADIUS = 0.025
COLORS = ("red", "blue")  # index = the "named" episode variable
MIN_SEPARATION = 0.15  # between the two spheres (m)
PATH_CLEARANCE = 0.05  # the straight path from the start to either sphere passes the other this far
REACH_COLOR_LAYOUT: dict[str, slice] = {
    **REACH_LAYOUT,  # "goal" and "goal_minus_tcp" are the named sphere's
    "other": slice(15, 18),
    "other_minus_tcp": slice(18, 21),
}
REACH_COLOR_PRIV_DIM = 21


def _segment_distance(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Distance [n] from points p [n, 3] to the segments a -> b ([n, 3] each)."""
    ab = b - a
    t = np.clip(np.sum((p - a) * ab, axis=1) / np.maximum(np.sum(ab * ab, axis=1), 1e-12), 0.0, 1.0)
    return np.linalg.norm(a + t[:, None] * ab - p, axis=1)


@register_task("ReachColor")
class ReachColor(Task):
    max_episode_steps = 50
    privileged_dim = REACH_COLOR_PRIV_DIM
    layout = REACH_COLOR_LAYOUT
    differences = {**REACH_DIFFERENCES, "other_minus_tcp": ("other", "tcp")}
    scene = SceneOptions(cube=False, markers=("sphere", "target_sphere"), pole=True, sphere_radius=0.02,
                         goal_rgba=PALETTE["red"], target_rgba=PALETTE["blue"])

    @staticmethod
    def _draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """tcp, red, blue [n, 3] each: the red sphere left of the start (x < 0), the blue one
        right of it (not yet checked for separation)."""
        tcp = np.stack([rng.uniform(-0.05, 0.05, n), rng.uniform(-0.05, 0.05, n),
                        rng.uniform(0.12, 0.18, n)], axis=1)
        red, blue = (np.stack([sign * rng.uniform(0.08, 0.12, n), rng.uniform(-0.05, 0.05, n),
                               rng.uniform(0.08, 0.12, n)], axis=1) for sign in (-1.0, 1.0))
        return tcp, red, blue

    def sample_episode(self, rng: np.random.Generator, n: int) -> Episode:
        tcp, red, blue = self._draw(rng, n)
        while True:  # redraw rows whose spheres are too close or in each other's way
            bad = ((np.linalg.norm(red - blue, axis=1) < MIN_SEPARATION)
                   | (_segment_distance(tcp, red, blue) < PATH_CLEARANCE)
                   | (_segment_distance(tcp, blue, red) < PATH_CLEARANCE))
            if not bad.any():
                break
            rows = np.flatnonzero(bad)
            tcp[rows], red[rows], blue[rows] = self._draw(rng, len(rows))
        return {"tcp": tcp, "gap": np.full(n, 0.09), "goal": red, "target": blue,
                "named": rng.integers(0, 2, n)}

    def instruction(self, ep: Episode, i: int) -> str:
        return f"reach the {COLORS[ep['named'][i]]} target"

    @staticmethod
    def _named_other(s: SimView, ep: Episode) -> tuple[np.ndarray, np.ndarray]:
        """Centres [n, 3] of the named sphere and of the other one."""
        xp, blue = array_namespace(s.tcp), (ep["named"] == 1)[:, None]
        return xp.where(blue, s.target, s.goal), xp.where(blue, s.goal, s.target)

    def evaluate(self, s: SimView, ep: Episode) -> dict[str, np.ndarray]:
        named, other = self._named_other(s, ep)
        dist = norm(named - s.tcp)
        dist_other = norm(other - s.tcp)
        success = dist < SUCCESS_RADIUS
        return {"success": success, "fail": (dist_other < SUCCESS_RADIUS) & ~success,
                "dist_to_goal": dist, "dist_to_other": dist_other}

    def progress(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        return shaped(ev["dist_to_goal"])

    def privileged(self, s: SimView, ep: Episode, ev: dict[str, np.ndarray]) -> np.ndarray:
        named, other = self._named_other(s, ep)
        out = empty_like_rows(s.tcp, REACH_COLOR_PRIV_DIM)
        out[:, :9] = state_obs(s)
        out[:, 9:12] = named
        out[:, 12:15] = named - s.tcp
        out[:, 15:18] = other
        out[:, 18:21] = other - s.tcp
        return out

    @staticmethod
    def expert(priv: np.ndarray) -> np.ndarray:
        """Reach's expert on the named sphere: a straight line at full speed, gripper open."""
        return Reach.expert(priv)
