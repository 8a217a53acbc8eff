"""Indices into the scene's state vectors, and a vectorised read-out of the quantities tasks use.

Everything is read from the state (qpos, qvel, ctrl, mocap_pos), which is current after every
`Batch.step`, so no forward stage is needed to observe.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from sims.mujoco.scene import FINGER_MAX


@dataclass(frozen=True)
class Handles:
    """Addresses of the scene's joints, actuators, mocap bodies and geoms (-1 when absent)."""

    tcp_qpos: np.ndarray  # int [3] qpos of the x, y, z slides
    tcp_qvel: np.ndarray  # int [3]
    finger_qpos: np.ndarray  # int [2] left, right finger travel
    finger_qvel: np.ndarray  # int [2]
    cube_qpos: int  # start of the cube's free joint (pos 3 + quat 4), or -1
    cube_qvel: int  # start of its 6 velocities, or -1
    target_mocap: int  # mocap index of the target square, or -1
    goal_mocap: int  # mocap index of the goal sphere, or -1
    cube_geom: int
    target_geom: int
    goal_geom: int
    cube_b_qpos: int = -1  # the second cube's free joint (SceneOptions.second_cube), or -1
    cube_b_qvel: int = -1
    cube_b_geom: int = -1

    @classmethod
    def from_model(cls, model: mujoco.MjModel) -> "Handles":
        def jnt(name: str) -> int:
            return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)

        def qadr(name: str) -> int:
            j = jnt(name)
            return int(model.jnt_qposadr[j]) if j >= 0 else -1

        def vadr(name: str) -> int:
            j = jnt(name)
            return int(model.jnt_dofadr[j]) if j >= 0 else -1

        def mocap(name: str) -> int:
            b = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
            return int(model.body_mocapid[b]) if b >= 0 else -1

        def geom(name: str) -> int:
            return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)

        return cls(
            tcp_qpos=np.array([qadr(n) for n in "xyz"]),
            tcp_qvel=np.array([vadr(n) for n in "xyz"]),
            finger_qpos=np.array([qadr("finger_left"), qadr("finger_right")]),
            finger_qvel=np.array([vadr("finger_left"), vadr("finger_right")]),
            cube_qpos=qadr("cube"),
            cube_qvel=vadr("cube"),
            target_mocap=mocap("target"),
            goal_mocap=mocap("goal"),
            cube_geom=geom("cube"),
            target_geom=geom("target"),
            goal_geom=geom("goal"),
            cube_b_qpos=qadr("cube_b"),
            cube_b_qvel=vadr("cube_b"),
            cube_b_geom=geom("cube_b"),
        )


@dataclass
class SimView:
    """Per-env physical quantities with leading dim n (world frame, SI): float64 numpy arrays
    under the C backend, float32 torch tensors on the env's device under MuJoCo Warp."""

    tcp: np.ndarray  # [n, 3] tool centre point
    tcp_vel: np.ndarray  # [n, 3]
    gap: np.ndarray  # [n] finger gap (inner faces), 0 closed .. 0.09 open
    gap_vel: np.ndarray  # [n]
    grip_cmd: np.ndarray  # [n] last gripper command in [-1, 1] (+1 closed)
    cube: np.ndarray | None  # [n, 3] cube centre
    cube_quat: np.ndarray | None  # [n, 4] (w, x, y, z)
    cube_vel: np.ndarray | None  # [n, 3]
    cube_angvel: np.ndarray | None  # [n, 3]
    target: np.ndarray | None  # [n, 3] target square centre (on the table)
    goal: np.ndarray | None  # [n, 3] goal sphere centre
    cube_b: np.ndarray | None = None  # [n, 3] the second cube's centre (SceneOptions.second_cube)
    cube_b_quat: np.ndarray | None = None  # [n, 4]
    cube_b_vel: np.ndarray | None = None  # [n, 3]
    cube_b_angvel: np.ndarray | None = None  # [n, 3]


def gap_to_cmd(gap_target: np.ndarray) -> np.ndarray:
    """Gap actuator target [n] -> gripper command in [-1, 1] (+1 closed)."""
    return 1.0 - gap_target / FINGER_MAX


def cmd_to_gap(cmd: np.ndarray) -> np.ndarray:
    """Gripper command [n] in [-1, 1] -> gap actuator target in [0, 2 * FINGER_MAX]."""
    return (1.0 - cmd) * FINGER_MAX


def cols(idx: np.ndarray) -> np.ndarray | slice:
    """Column indices [k] as a slice when they are consecutive (a view, also of a torch tensor)."""
    start = int(idx[0])
    return slice(start, start + len(idx)) if np.array_equal(idx, np.arange(start, start + len(idx))) else idx


def read(h: Handles, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, mocap_pos: np.ndarray,
         rows: np.ndarray | None = None) -> SimView:
    """Gather a SimView from state arrays [B, nq], [B, nv], [B, nu], [B, nmocap, 3] (rows: subset),
    numpy arrays or torch tensors."""
    if rows is not None:
        qpos, qvel, ctrl, mocap_pos = qpos[rows], qvel[rows], ctrl[rows], mocap_pos[rows]
    f, fv = h.finger_qpos, h.finger_qvel
    c, cv = h.cube_qpos, h.cube_qvel
    has_cube = c >= 0
    return SimView(
        tcp=qpos[:, cols(h.tcp_qpos)],
        tcp_vel=qvel[:, cols(h.tcp_qvel)],
        gap=qpos[:, f[0]] + qpos[:, f[1]],
        gap_vel=qvel[:, fv[0]] + qvel[:, fv[1]],
        grip_cmd=gap_to_cmd(ctrl[:, 3]),
        cube=qpos[:, c:c + 3] if has_cube else None,
        cube_quat=qpos[:, c + 3:c + 7] if has_cube else None,
        cube_vel=qvel[:, cv:cv + 3] if has_cube else None,
        cube_angvel=qvel[:, cv + 3:cv + 6] if has_cube else None,
        target=mocap_pos[:, h.target_mocap] if h.target_mocap >= 0 else None,
        goal=mocap_pos[:, h.goal_mocap] if h.goal_mocap >= 0 else None,
        **({} if h.cube_b_qpos < 0 else {
            "cube_b": qpos[:, h.cube_b_qpos:h.cube_b_qpos + 3], "cube_b_quat": qpos[:, h.cube_b_qpos + 3:h.cube_b_qpos + 7],
            "cube_b_vel": qvel[:, h.cube_b_qvel:h.cube_b_qvel + 3],
            "cube_b_angvel": qvel[:, h.cube_b_qvel + 3:h.cube_b_qvel + 6]}),
    )
