"""Command interfaces: how RobotEnv's safe commands reach an arm's controller
(RobotEnvConfig.interface; docs/robot_interfaces.md).

A command is what SafetyFilter returned: float64 [A], an EE delta [dx, dy, dz, gripper] in action
units (safety mode "ee_delta") or joint targets (mode "joint"). Each interface turns it into the
message its controller takes, on `command_topic` (default per interface, DEFAULT_TOPICS):

  cmd               std_msgs/Float64MultiArray of the A values (the twin's /cmd), or a one-point
                    JointTrajectory (command_type)
  pose_target       geometry_msgs/PoseStamped in frame_id: ee_origin + TCP + delta * ee_step, the
                    orientation held (ee_orientation, or the pose at reset): CRISP's target_pose
  twist             geometry_msgs/TwistStamped in frame_id: delta * ee_step * control_hz m/s,
                    angular 0: MoveIt Servo's delta_twist_cmds. A zero twist on hold, e-stop, close
  joint_trajectory  trajectory_msgs/JointTrajectory: a chunk of K commands is ONE trajectory of K
                    points, point k at time_from_start (k + 1) / control_hz:
                    joint_trajectory_controller's ~/joint_trajectory
  forward_commands  std_msgs/Float64MultiArray of joint positions: forward_command_controller's
                    ~/commands
For the two joint interfaces an EE delta of the tabletop layout (whose joints x, y, z are the TCP
slides, as in the twin) becomes targets tcp + delta * ee_step; joint commands go as they are.

The gripper (the EE command's 4th value, or the last joint command of the "arm" layout; +1 closed,
-1 open) goes on its own topic, gripper_topic (std_msgs/Float64 or Float64MultiArray of one value),
as gripper_open + (g + 1) / 2 * (gripper_closed - gripper_open): a width in metres, or a joint
position. The control_msgs GripperCommand action is not spoken: control_msgs is not among the ROS 2
wheels of the package registry (docs/robot_interfaces.md, "The gripper").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_bridge import ros_types as rt
from robot_bridge.transport import COMMAND_QOS, Transport

INTERFACES = ("cmd", "pose_target", "twist", "joint_trajectory", "forward_commands")
DEFAULT_TOPICS = {"cmd": "/cmd", "pose_target": "/target_pose", "twist": "/servo_node/delta_twist_cmds",
                  "joint_trajectory": "/joint_trajectory_controller/joint_trajectory",
                  "forward_commands": "/forward_position_controller/commands"}
CARTESIAN = ("pose_target", "twist")
GRIPPER_TYPES = ("std_msgs/msg/Float64", "std_msgs/msg/Float64MultiArray")


def pose_stamped(xyz: np.ndarray, quat_wxyz: np.ndarray, frame_id: str, t: float | None = None) -> Any:
    """geometry_msgs/msg/PoseStamped of a position [3] and a unit quaternion (w, x, y, z) [4]."""
    x, y, z = (float(v) for v in xyz)
    qw, qx, qy, qz = (float(v) for v in quat_wxyz)
    pose = rt.msg_class("geometry_msgs/msg/Pose")(
        position=rt.msg_class("geometry_msgs/msg/Point")(x=x, y=y, z=z),
        orientation=rt.msg_class("geometry_msgs/msg/Quaternion")(x=qx, y=qy, z=qz, w=qw))
    return rt.msg_class("geometry_msgs/msg/PoseStamped")(header=rt.header(frame_id, t), pose=pose)


def twist_stamped(linear: np.ndarray, frame_id: str, angular: np.ndarray | None = None, t: float | None = None) -> Any:
    """geometry_msgs/msg/TwistStamped of linear [3] (m/s) and angular [3] (rad/s, default 0)."""
    v3 = rt.msg_class("geometry_msgs/msg/Vector3")
    ang = np.zeros(3) if angular is None else angular
    twist = rt.msg_class("geometry_msgs/msg/Twist")(linear=v3(*(float(v) for v in linear)),
                                                    angular=v3(*(float(v) for v in ang)))
    return rt.msg_class("geometry_msgs/msg/TwistStamped")(header=rt.header(frame_id, t), twist=twist)


def pose_values(msg: Any) -> np.ndarray:
    """PoseStamped -> float64 [7]: x, y, z, qw, qx, qy, qz."""
    p, q = msg.pose.position, msg.pose.orientation
    return np.array([p.x, p.y, p.z, q.w, q.x, q.y, q.z], np.float64)


def gripper_value(g: float, open_: float, closed: float) -> float:
    """Gripper command g in [-1 (open), 1 (closed)] -> the gripper's units (width or position)."""
    return open_ + (float(np.clip(g, -1.0, 1.0)) + 1.0) / 2.0 * (closed - open_)


def gripper_command(value: float, open_: float, closed: float) -> float:
    """The inverse of gripper_value: a measured width or position -> g in [-1, 1]."""
    return float(np.clip(2.0 * (value - open_) / (closed - open_) - 1.0, -1.0, 1.0))


class ArmCommands:
    """The publishers of one interface (and the gripper's) and the messages it sends.
    cfg: a RobotEnvConfig; ee_step: metres per EE action unit."""

    def __init__(self, cfg: Any, tr: Transport):
        self.cfg = c = cfg
        self.ee_step = c.safety.ee_step if c.safety is not None else 0.02
        msg_type = {"cmd": c.command_type, "pose_target": "geometry_msgs/msg/PoseStamped",
                    "twist": "geometry_msgs/msg/TwistStamped", "joint_trajectory": "trajectory_msgs/msg/JointTrajectory",
                    "forward_commands": "std_msgs/msg/Float64MultiArray"}[c.interface]
        self.pub = tr.publisher(c.topic(c.command_topic), msg_type, COMMAND_QOS)
        self.grip_pub = tr.publisher(c.topic(c.gripper_topic), c.gripper_type, COMMAND_QOS) if c.gripper_topic else None
        self.orientation = np.array(c.ee_orientation if c.ee_orientation is not None else (1.0, 0, 0, 0), np.float64)
        self.last_gripper: float | None = None
        self.sent: list[Any] = []  # nothing kept unless keep_sent (tests read what went out)
        self.keep_sent = False

    # ------------------------------------------------------------------ what is commanded
    @property
    def ee(self) -> bool:
        return self.cfg.safety is None or self.cfg.safety.mode == "ee_delta"

    def has_gripper_value(self) -> bool:
        """Whether the command's gripper value goes on the gripper topic."""
        c = self.cfg
        return self.grip_pub is not None and (c.action_dim > 3 if self.ee else c.state_layout == "arm")

    def targets(self, cmds: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Joint or TCP targets float64 [K, n] of K commands [K, A] from position start [n]:
        EE deltas accumulate (tcp + sum of delta * ee_step); joint commands are the targets."""
        if not self.ee:
            n = len(self.cfg.joint_names)
            return np.asarray(cmds, np.float64)[:, :n]
        return np.asarray(start, np.float64)[:3] + np.cumsum(cmds[:, :3] * self.ee_step, axis=0)

    # ------------------------------------------------------------------ sending
    def _out(self, pub: Any, msg: Any) -> None:
        pub.publish(msg)
        if self.keep_sent:
            self.sent.append(msg)

    def send(self, cmds: np.ndarray, start: np.ndarray) -> None:
        """Send K safe commands [K, A] (K > 1: the joint_trajectory interface only) acting from
        position start (TCP xyz in the policy frame [3], or joint positions [J])."""
        c = self.cfg
        cmds = np.atleast_2d(np.asarray(cmds, np.float64))
        if self.has_gripper_value():  # before the arm's command: a stepped twin uses it in that step
            self.gripper(float(cmds[-1, 3] if self.ee else cmds[-1, -1]))
        dt = 1.0 / c.control_hz
        if c.interface == "cmd":
            if c.command_type == "std_msgs/msg/Float64MultiArray":
                self._out(self.pub, rt.float64_array(cmds[-1]))
            else:
                self._out(self.pub, rt.joint_trajectory(c.joint_names[:cmds.shape[1]], cmds[-1:], dt))
        elif c.interface == "pose_target":
            target = np.asarray(c.ee_origin) + self.targets(cmds, start)[-1]
            self._out(self.pub, pose_stamped(target, self.orientation, c.frame_id))
        elif c.interface == "twist":
            self._out(self.pub, twist_stamped(cmds[-1, :3] * self.ee_step * c.control_hz, c.frame_id))
        elif c.interface == "joint_trajectory":
            pts = self.targets(cmds, start)
            self._out(self.pub, rt.joint_trajectory(c.joint_names[:pts.shape[1]], pts, dt, frame_id=""))
        else:
            self._out(self.pub, rt.float64_array(self.targets(cmds, start)[-1]))

    def gripper(self, g: float) -> None:
        c = self.cfg
        v = gripper_value(g, c.gripper_open, c.gripper_closed)
        msg = rt.scalar(c.gripper_type, v) if c.gripper_type.endswith("/Float64") else rt.float64_array(np.array([v]))
        self._out(self.grip_pub, msg)
        self.last_gripper = g

    def hold(self, pose: np.ndarray | None = None, joints: np.ndarray | None = None) -> bool:
        """Command the arm to stay where it is: a zero twist; the pose `pose` (x, y, z in the base
        frame) as target; the joint positions `joints` as a one-point trajectory or forward command.
        Returns whether something was sent (nothing for `cmd`, or without the position needed)."""
        c = self.cfg
        if c.interface == "twist":
            self._out(self.pub, twist_stamped(np.zeros(3), c.frame_id))
        elif c.interface == "pose_target" and pose is not None:
            self._out(self.pub, pose_stamped(pose[:3], self.orientation, c.frame_id))
        elif c.interface == "joint_trajectory" and joints is not None:
            self._out(self.pub, rt.joint_trajectory(c.joint_names[:len(joints)], np.asarray(joints)[None], 1.0 / c.control_hz))
        elif c.interface == "forward_commands" and joints is not None:
            self._out(self.pub, rt.float64_array(np.asarray(joints, np.float64)))
        else:
            return False
        return True
