"""The state vector RobotEnv observes, per state layout (RobotEnvConfig.state_layout):

  tabletop  [9]       from JointState x, y, z, finger_left, finger_right: TCP xyz, its velocity,
                      finger gap, gap velocity, the last gripper command (the MuJoCo suite's state)
  joints    [2 J]     positions then velocities of joint_names
  ee_pose   [9]       the tabletop 9 from a PoseStamped (a Cartesian controller's current_pose):
                      TCP = position - ee_origin, its velocity between consecutive poses, the gap
                      from gripper_joints (their positions summed, mapped from gripper_open..closed
                      to the MuJoCo gap 2 FINGER_MAX..0) or else from the last gripper command,
                      gap velocity 0, the last gripper command
  arm       [2 J + 2] a 6-7 joint arm and its gripper: positions and velocities of joint_names,
                      the gripper's value (gripper_joints summed; 0 without), the last gripper command
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_bridge import ros_types as rt
from robot_bridge.arm_commands import gripper_command, pose_values
from sims.vecenv import EnvError

FINGER_MAX = 0.045  # the MuJoCo gripper: gap command = 1 - gap / FINGER_MAX


def check_pose(msg: Any) -> str | None:
    p, q = msg.pose.position, msg.pose.orientation
    return None if np.isfinite([p.x, p.y, p.z, q.w, q.x, q.y, q.z]).all() else "NaN or inf in the pose"


class StateReader:
    """cfg: a RobotEnvConfig. grip: the last gripper command sent (set by RobotEnv); grip_js: the
    JointState subscription holding gripper_joints (ee_pose layout)."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.on_pose = cfg.state_layout == "ee_pose"
        J = len(cfg.joint_names)
        self.dim = {"tabletop": 9, "ee_pose": 9, "joints": 2 * J, "arm": 2 * J + 2}[cfg.state_layout]
        self.n_pos = 3 if cfg.state_layout in ("tabletop", "ee_pose") else J  # what safety checks against
        self.grip = 0.0
        self.grip_js: Any = None
        self._vel: dict[float, np.ndarray] = {}  # pose stamp -> TCP velocity [3]
        self._prev: tuple[float, np.ndarray] | None = None

    def track(self, msg: Any) -> None:
        """ee_pose layout: the TCP velocity at each pose, from the one before (receive thread)."""
        t, xyz = rt.stamp_seconds(msg.header.stamp), pose_values(msg)[:3]
        prev = self._prev
        if prev is not None and t > prev[0]:
            self._vel[t] = (xyz - prev[1]) / (t - prev[0])
            while len(self._vel) > 32:
                self._vel.pop(next(iter(self._vel)))
        self._prev = (t, xyz)

    def check_joint_state(self, js: Any) -> str | None:
        names = list(js.name)
        missing = [n for n in (*self.cfg.joint_names, *self.cfg.gripper_joints) if n not in names]
        if missing:
            return f"missing joints {missing}; got {names}"
        if len(js.position) != len(names) or len(js.velocity) not in (0, len(names)):
            return f"{len(js.position)} positions and {len(js.velocity)} velocities for {len(names)} joints"
        idx = [names.index(n) for n in self.cfg.joint_names]
        values = np.concatenate([np.asarray(js.position, np.float64)[idx],
                                 np.asarray(js.velocity, np.float64)[idx] if len(js.velocity) else []])
        return None if np.isfinite(values).all() else "NaN or inf in positions or velocities"

    def gripper_measured(self, js: Any | None) -> float | None:
        """The gripper's value (gripper_joints' positions summed) in a joint state, if known."""
        if js is None or not self.cfg.gripper_joints:
            return None
        idx = {n: i for i, n in enumerate(js.name)}
        if any(n not in idx for n in self.cfg.gripper_joints):
            return None
        return float(sum(js.position[idx[n]] for n in self.cfg.gripper_joints))

    def vector(self, msg: Any) -> np.ndarray:
        """float64 [S] of a JointState (a PoseStamped in the ee_pose layout)."""
        c = self.cfg
        if self.on_pose:
            xyz = pose_values(msg)[:3] - np.asarray(c.ee_origin, np.float64)
            vel = self._vel.get(rt.stamp_seconds(msg.header.stamp), np.zeros(3))
            got = self.grip_js.latest() if self.grip_js is not None else None
            value = self.gripper_measured(got.msg if got else None)
            g = self.grip if value is None else gripper_command(value, c.gripper_open, c.gripper_closed)
            return np.array([*xyz, *vel, (1.0 - g) * FINGER_MAX, 0.0, self.grip])
        idx = {n: i for i, n in enumerate(msg.name)}
        missing = [n for n in c.joint_names if n not in idx]
        if missing:
            raise EnvError(f"joint_states: missing joints {missing}; got {list(msg.name)}")
        order = [idx[n] for n in c.joint_names]
        pos = np.asarray(msg.position, np.float64)[order]
        vel = np.asarray(msg.velocity, np.float64)[order] if len(msg.velocity) == len(msg.name) else np.zeros(len(order))
        if c.state_layout == "joints":
            return np.concatenate([pos, vel])
        if c.state_layout == "arm":
            value = self.gripper_measured(msg)
            return np.concatenate([pos, vel, [0.0 if value is None else value, self.grip]])
        return np.array([*pos[:3], *vel[:3], pos[3] + pos[4], vel[3] + vel[4], self.grip])

    def safety_position(self, pos: np.ndarray, action: Any) -> np.ndarray:
        """The position SafetyFilter checks an action against: pos, and in the arm layout the
        proposed gripper command itself (clipped to [-1, 1] by the joint limits; a gripper is not
        rate limited here)."""
        if self.cfg.state_layout != "arm":
            return pos
        try:
            a = action.detach().cpu().double().numpy() if hasattr(action, "detach") else action
            g = float(np.asarray(a, np.float64).reshape(-1)[-1])
        except (TypeError, ValueError, IndexError):
            g = self.grip
        return np.append(pos, np.clip(g, -1.0, 1.0) if np.isfinite(g) else self.grip)

    def gripper_now(self, msg: Any) -> float:
        """The gripper command [-1, 1] the gripper is at (after a reset; measured where possible)."""
        c = self.cfg
        if c.state_layout in ("tabletop", "ee_pose"):
            return float(np.clip(1.0 - self.vector(msg)[6] / FINGER_MAX, -1.0, 1.0))
        value = self.gripper_measured(msg) if c.state_layout == "arm" else None
        return 0.0 if value is None else gripper_command(value, c.gripper_open, c.gripper_closed)
