"""Grasp detection and the scripted reach-and-grasp routine shared by PickCube and PlaceCube."""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

from sims.mujoco.handles import SimView
from sims.mujoco.scene import CUBE_HALF, FINGER_HALF
from sims.mujoco.tasks.base import CUBE_LAYOUT

HOVER = 0.06  # height of the TCP above the cube centre while lining up (m)


def is_grasped(s: SimView) -> np.ndarray:
    """bool [n]: the cube is held between the closing fingers (geometric test, no contacts)."""
    xp = array_namespace(s.tcp)
    rel = s.cube - s.tcp
    width = 2 * CUBE_HALF
    return (
        (s.grip_cmd > 0.0)
        & (s.gap > width - 0.008)
        & (s.gap < width + 0.012)
        & (xp.abs(rel[:, 0]) < 0.012)
        & (xp.abs(rel[:, 1]) < FINGER_HALF[1] + 0.006)
        & (xp.abs(rel[:, 2]) < 0.02)
    )


def grasp_routine(priv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stateless approach to an ungrasped cube: hover above it with the gripper open, descend,
    close. priv [n, 32] -> (desired TCP displacement [n, 3] (m), gripper command [n])."""
    L = CUBE_LAYOUT
    tcp, cube = priv[:, L["tcp"]], priv[:, L["cube"]]
    rel = cube - tcp
    over = np.linalg.norm(rel[:, :2], axis=1) < 0.006
    at_height = np.abs(rel[:, 2]) < 0.006
    dest = cube.copy()
    # Line up above the cube first (at hover height), then go straight down.
    dest[:, 2] = np.where(over, cube[:, 2], np.maximum(tcp[:, 2], cube[:, 2] + HOVER))
    low_and_off = ~over & (tcp[:, 2] < cube[:, 2] + HOVER - 0.01)
    dest[:, :2] = np.where(low_and_off[:, None], tcp[:, :2], dest[:, :2])  # rise before moving
    grip = np.where(over & at_height, 1.0, -1.0)
    return dest - tcp, grip
