"""Scripted pick-and-place expert for libero_spatial ("pick up the black bowl ... and place it
on the plate"), on privileged state. pick_place decides from one observation (and, given it,
the previous finger gap); PickPlace, what expert_for returns, keeps that gap per env.

privileged [B, P] (sims/libero/env.py): eef pos [0:3], eef axis-angle [3:6], finger qpos [6:8],
the bowl's position [8:11], the plate's position [11:14]. The Panda's fingers close along world y
when the hand points down, so the bowl is taken by its rim: the grasp point is on the rim, on the
side of the bowl nearer to y = 0 (the robot's centre line), fingers astride the wall.
Actions float32 [B, 7]: OSC delta pose (a P-controller towards the phase's target, the hand
held pointing down) and the gripper (-1 open, +1 close).
"""

from __future__ import annotations

import numpy as np

RIM = 0.052  # m, from the bowl's origin to the grasp point, along y (the wall is at 0.05-0.057)
GRASP_Z = 0.035  # m, grasp point above the bowl's origin (the rim is 0.053 above it)
PLACE_Z = 0.03  # m, bowl origin above the plate's origin when the gripper opens
CLEAR_Z = 0.12  # m, travel height above the grasp / place point
HELD_WIDTH = (0.001, 0.012)  # finger gap (m) of a gripper closed on the bowl's wall
POS_GAIN = 10.0  # action per metre of error (1 = the OSC's 5 cm step)
ROT_GAIN = 2.0  # action per radian


def _rotmat(rotvec: np.ndarray) -> np.ndarray:
    """axis * angle [B, 3] -> rotation matrices [B, 3, 3] (Rodrigues)."""
    angle = np.linalg.norm(rotvec, axis=1, keepdims=True)
    axis = rotvec / np.maximum(angle, 1e-12)
    x, y, z = axis.T
    K = np.zeros((len(rotvec), 3, 3))
    K[:, 0, 1], K[:, 0, 2], K[:, 1, 0], K[:, 1, 2], K[:, 2, 0], K[:, 2, 1] = -z, y, z, -x, -y, x
    s, c = np.sin(angle)[:, :, None], np.cos(angle)[:, :, None]
    return np.eye(3)[None] + s * K + (1 - c) * K @ K


def _rotvec(R: np.ndarray) -> np.ndarray:
    """rotation matrices [B, 3, 3] -> axis * angle [B, 3] (angles below pi)."""
    cos = np.clip((np.trace(R, axis1=1, axis2=2) - 1) / 2, -1.0, 1.0)
    angle = np.arccos(cos)
    v = np.stack([R[:, 2, 1] - R[:, 1, 2], R[:, 0, 2] - R[:, 2, 0], R[:, 1, 0] - R[:, 0, 1]], axis=1)
    return v * (angle / np.maximum(2 * np.sin(angle), 1e-9))[:, None]


DOWN = np.diag([1.0, -1.0, -1.0])  # hand pointing down, fingers along world y (pi about x)


def pick_place(privileged: np.ndarray, prev_width: np.ndarray | None = None) -> np.ndarray:
    """privileged float [B, P] -> actions float32 [B, 7]. prev_width float [B]: the finger gap
    at the previous call (PickPlace keeps it); a gap that stopped shrinking below 2.5 cm then
    also counts as a grasp (a rim taken at a slant closes wider than a straight one)."""
    x = np.asarray(privileged, np.float64)
    p, aa, fingers, bowl, plate = x[:, 0:3], x[:, 3:6], x[:, 6:8], x[:, 8:11], x[:, 11:14]
    side = np.where(bowl[:, 1] > 0, -1.0, 1.0)[:, None] * np.array([0.0, RIM, 0.0])
    grasp = bowl + side + np.array([0.0, 0.0, GRASP_Z])
    place = plate + side + np.array([0.0, 0.0, GRASP_Z + PLACE_Z])
    width = fingers[:, 0] - fingers[:, 1]
    near = (np.linalg.norm((grasp - p)[:, :2], axis=1) < 0.02) & (np.abs(grasp[:, 2] - p[:, 2]) < 0.03)
    closed = width < HELD_WIDTH[1]
    if prev_width is not None:
        closed |= (width < 0.025) & (np.abs(width - prev_width) < 5e-4)
    held = near & (width > HELD_WIDTH[0]) & closed
    goal = np.where(held[:, None], place, grasp)
    err_xy = np.linalg.norm((goal - p)[:, :2], axis=1)
    high = goal[:, 2] + CLEAR_Z
    target = goal.copy()
    # far in xy: first rise to the travel height, then move across at it; once below it, only a
    # larger error sends the hand up again (a nudged bowl should not make it bob up and down)
    far = err_xy > np.where(p[:, 2] > high - 0.04, 0.01, 0.025)
    target[far, 2] = high[far]
    low = far & (p[:, 2] < high - 0.04)
    target[low, :2] = p[low, :2]
    at_goal = ~far & (np.abs(goal[:, 2] - p[:, 2]) < 0.008)
    closing = ~held & near & (width > HELD_WIDTH[0]) & (at_goal | (width < 0.07))
    target = np.where(closing[:, None], p, target)  # closing at the grasp point: stay
    grip = np.where(held | closing, 1.0, -1.0)  # closed on nothing (width < 0.003): open again
    grip = np.where(held & at_goal, -1.0, grip)  # at the place point: open
    act = np.zeros((len(x), 7))
    act[:, :3] = np.clip(POS_GAIN * (target - p), -1.0, 1.0)
    act[:, 3:6] = np.clip(ROT_GAIN * _rotvec(DOWN[None] @ _rotmat(aa).transpose(0, 2, 1)), -1.0, 1.0)
    act[:, 6] = grip
    return act.astype(np.float32)


class PickPlace:
    """pick_place with the finger gap of the previous call per env; reset(env_ids, privileged)
    at new episodes (embodied collect calls it)."""

    def __init__(self):
        self.prev: np.ndarray | None = None

    def reset(self, env_ids: np.ndarray, privileged: np.ndarray) -> None:
        if self.prev is not None:
            self.prev[np.asarray(env_ids)] = np.nan  # no history: |width - nan| < tol is False

    def __call__(self, privileged: np.ndarray) -> np.ndarray:
        x = np.asarray(privileged, np.float64)
        if self.prev is None or len(self.prev) != len(x):
            self.prev = np.full(len(x), np.nan)
        act = pick_place(x, self.prev)
        self.prev = x[:, 6] - x[:, 7]
        return act


def expert_for(task: str):
    """The scripted expert of a LIBERO task name: pick_place for libero_spatial (its ten tasks
    all pick a black bowl and place it on the plate); EnvError for the other suites."""
    from sims.libero.tasks import parse_name
    from sims.vecenv import EnvError

    suite, _ = parse_name(task)
    if suite != "libero_spatial":
        raise EnvError(f"task: no scripted expert for {suite}; allowed: libero:libero_spatial[/TASK]")
    return PickPlace()
