"""Scripted experts for ManiSkill tasks in pd_ee_delta_pose, for `embodied collect`.

Each expert is a closed-loop function of the privileged observation, like the MuJoCo experts:
it works out the phase from the state (aligned above the cube? grasped? behind the cube?) and
moves the TCP in a straight line toward that phase's waypoint. The waypoints are the ones of
ManiSkill's motion-planning solutions (mani_skill/examples/motionplanning/panda/solutions):
PickCube: reach 5 cm above a yaw-aligned top-down grasp, descend, close, carry to the goal;
PushCube / PullCube: gripper closed, stand 5 cm behind the cube, push it along the goal line.
These experts plan nothing; the mplib motion-planning experts, which plan joint paths in a
separate numpy-1 interpreter (mplib crashes under numpy 2), are in sims/maniskill/mplib_expert.py
(`ms:<task>@pd_joint_delta_pos`; see docs/maniskill.md).

Action (pd_ee_delta_pose, normalised): [dx, dy, dz, rx, ry, rz, gripper], position deltas of
0.1 m and XYZ-Euler rotation deltas of 0.1 rad per unit, in the robot-root frame (the root
is translated, not rotated, so world axes); gripper 1 open, -1 closed.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np
from scipy.spatial.transform import Rotation

from sims.maniskill.tasks import DEFAULT_CONTROL_MODE, parse_name
from sims.vecenv import EnvError

POS_STEP, ROT_STEP = 0.1, 0.1  # m and rad per unit action
DOWN = Rotation.from_quat([1.0, 0.0, 0.0, 0.0])  # TCP pointing down (x, y, z, w): 180 deg about x


@lru_cache(maxsize=None)
def state_layout(env_id: str) -> dict[str, slice]:
    """Column ranges of ManiSkill's flattened "state" observation, e.g. "tcp_pose" -> slice(19, 26)."""
    from sims.maniskill import lavapipe

    lavapipe.configure()
    import gymnasium as gym

    import mani_skill.envs  # noqa: F401

    env = gym.make(env_id, num_envs=1, obs_mode="state_dict", control_mode=DEFAULT_CONTROL_MODE,
                   sim_backend="physx_cpu", render_backend="cpu")
    obs, _ = env.reset(seed=0)
    out, at = {}, 0
    for group in ("agent", "extra"):
        for key, v in obs[group].items():
            width = int(np.prod(v.shape[1:])) if v.dim() > 1 else 1
            out[key] = slice(at, at + width)
            at += width
    env.close()
    return out


def _move(tcp: np.ndarray, target: np.ndarray, speed: float = 0.5) -> np.ndarray:
    """Position action [n, 3] toward target [n, 3], at most `speed` (x 0.1 m) per step."""
    a = (target - tcp) / POS_STEP
    norm = np.linalg.norm(a, axis=1, keepdims=True)
    return a * np.minimum(1.0, speed / np.maximum(norm, 1e-9))


def _rotate(tcp_quat: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """Rotation action [n, 3] turning the TCP (quat wxyz [n, 4]) to pointing down at yaw [n]."""
    cur = Rotation.from_quat(tcp_quat[:, [1, 2, 3, 0]])
    want = Rotation.from_euler("z", yaw[:, None]) * DOWN
    # Measured: a rotation action v turns the TCP by about -v (world axes) per step with this
    # controller (mani-skill 3.0.1, root_aligned_body_rotation), hence the minus sign.
    return np.clip(-(want * cur.inv()).as_rotvec() / ROT_STEP, -1, 1)


def _tcp_yaw(tcp_quat: np.ndarray) -> np.ndarray:
    """Yaw [n] of the TCP's x axis (its pointing-down frame is Rz(yaw) * DOWN)."""
    m = Rotation.from_quat(tcp_quat[:, [1, 2, 3, 0]]).as_matrix()
    return np.arctan2(m[:, 1, 0], m[:, 0, 0])


def _grasp_yaw(cube_quat: np.ndarray, tcp_yaw: np.ndarray) -> np.ndarray:
    """The yaw [n] aligned with a cube face (cube yaw + k * 90 deg) nearest the TCP's yaw."""
    m = Rotation.from_quat(cube_quat[:, [1, 2, 3, 0]]).as_matrix()
    cube_yaw = np.arctan2(m[:, 1, 0], m[:, 0, 0])
    d = (cube_yaw - tcp_yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4
    return tcp_yaw + d


def pick_expert(layout: dict[str, slice], hover: float = 0.05) -> Callable[[np.ndarray], np.ndarray]:
    """PickCube: align above the cube, descend, close, carry to the goal (priv [n, P] -> [n, 7])."""
    L = layout

    def act(priv: np.ndarray) -> np.ndarray:
        priv = np.asarray(priv, np.float64)
        tcp, quat = priv[:, L["tcp_pose"]][:, :3], priv[:, L["tcp_pose"]][:, 3:]
        cube, cquat = priv[:, L["obj_pose"]][:, :3], priv[:, L["obj_pose"]][:, 3:]
        goal, grasped = priv[:, L["goal_pos"]], priv[:, L["is_grasped"]][:, 0] > 0.5
        fingers = priv[:, L["qpos"]][:, 7:9].sum(axis=1)  # 0.08 open, ~0.04 on the cube
        n = len(priv)
        yaw = _grasp_yaw(cquat, _tcp_yaw(quat))
        a = np.zeros((n, 7))
        a[:, 3:6] = _rotate(quat, yaw)
        off_xy = np.linalg.norm(tcp[:, :2] - cube[:, :2], axis=1)
        yaw_err = np.abs(yaw - _tcp_yaw(quat))
        aligned = (off_xy < 0.01) & (yaw_err < 0.1)
        at_cube = aligned & (tcp[:, 2] - cube[:, 2] < 0.01)
        above = cube + np.array([0.0, 0.0, hover])
        # not aligned: go (back) up to the hover point; aligned: descend; at the cube: close
        target = np.where(aligned[:, None], cube, above)
        target = np.where((~aligned & (tcp[:, 2] < cube[:, 2] + hover - 0.02) & (off_xy > 0.02))[:, None],
                          np.c_[tcp[:, :2], above[:, 2:]], target)
        a[:, :3] = _move(tcp, target)
        a[:, 6] = np.where(at_cube, -1.0, 1.0)
        # a closed hand that missed the cube opens again (and retries)
        missed = at_cube & ~grasped & (fingers < 0.03)
        a[missed, 6] = 1.0
        a[grasped, :3] = _move(tcp[grasped], goal[grasped], speed=0.6)
        a[grasped, 6] = -1.0
        return np.clip(a, -1, 1).astype(np.float32)

    return act


def push_expert(layout: dict[str, slice], behind: float = 0.05) -> Callable[[np.ndarray], np.ndarray]:
    """PushCube / PullCube: gripper closed, stand behind the cube on the cube-goal line, push."""
    L = layout

    def act(priv: np.ndarray) -> np.ndarray:
        priv = np.asarray(priv, np.float64)
        tcp, quat = priv[:, L["tcp_pose"]][:, :3], priv[:, L["tcp_pose"]][:, 3:]
        cube, goal = priv[:, L["obj_pose"]][:, :3], priv[:, L["goal_pos"]]
        u = goal[:, :2] - cube[:, :2]
        u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-9)
        rel = tcp[:, :2] - cube[:, :2]
        along = (rel * u).sum(axis=1)  # < 0: behind the cube
        side = np.abs(rel[:, 0] * u[:, 1] - rel[:, 1] * u[:, 0])
        low_z = cube[:, 2]
        pre = np.c_[cube[:, :2] - behind * u, low_z]
        in_place = (side < 0.01) & (along < -0.02) & (along > -behind - 0.02)
        n = len(priv)
        a = np.zeros((n, 7))
        a[:, 3:6] = _rotate(quat, _tcp_yaw(quat))  # keep pointing down
        a[:, 6] = -1.0
        high = np.c_[pre[:, :2], low_z + 0.06]
        near = np.linalg.norm(tcp[:, :2] - pre[:, :2], axis=1) < 0.01
        target = np.where(near[:, None], pre, high)
        # low but not behind the cube: rise before crossing over it
        rise = ~near & (tcp[:, 2] < low_z + 0.04) & ~in_place
        target = np.where(rise[:, None], np.c_[tcp[:, :2], high[:, 2:]], target)
        push = in_place & (tcp[:, 2] < low_z + 0.01)
        perp = rel - along[:, None] * u  # the TCP's offset from the cube-goal line
        drive = np.c_[tcp[:, :2] + 0.05 * u - perp, low_z]
        target = np.where(push[:, None], drive, target)
        a[:, :3] = _move(tcp, target, speed=0.5)
        return np.clip(a, -1, 1).astype(np.float32)

    return act


EXPERTS = {"PickCube-v1": pick_expert, "PushCube-v1": push_expert, "PullCube-v1": push_expert}


def expert_for(task: str) -> Callable[[np.ndarray], np.ndarray]:
    """The scripted expert of a ManiSkill task: privileged [B, P] -> actions float32 [B, 7]."""
    entry, mode = parse_name(task)
    if entry.env_id not in EXPERTS:
        raise EnvError(f"expert: no scripted expert for {task}; experts exist for "
                       f"{', '.join('ms:' + k for k in EXPERTS)}")
    if (mode or DEFAULT_CONTROL_MODE) != DEFAULT_CONTROL_MODE:
        raise EnvError(f"expert: the ManiSkill experts act in {DEFAULT_CONTROL_MODE}, not {mode}")
    return EXPERTS[entry.env_id](state_layout(entry.env_id))
