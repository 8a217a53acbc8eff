"""RobotEnvConfig: what RobotEnv (robot_bridge/robot_env.py) connects to and how, checked when made:
topics, message types, the state layout, the command interface and the gripper
(robot_bridge/arm_commands.py, docs/robot_interfaces.md), camera handling, pacing, how episodes
reset and end, and the safety limits. A bad field is one EnvError naming it and what is allowed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from robot_bridge import camera as cam_tf
from robot_bridge.arm_commands import CARTESIAN, DEFAULT_TOPICS, GRIPPER_TYPES, INTERFACES
from robot_bridge.safety import SafetyConfig
from sims.vecenv import EnvError

RESETS, SUCCESSES, LAYOUTS = ("topic", "service", "operator"), ("topic", "classifier", "operator"), ("tabletop", "joints", "ee_pose", "arm")
COMMAND_TYPES = ("std_msgs/msg/Float64MultiArray", "trajectory_msgs/msg/JointTrajectory")
IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


def _allowed(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise EnvError(f"{name}: unknown {value!r}; allowed: {', '.join(allowed)}")


@dataclass
class RobotEnvConfig:
    """Topics are joined to `namespace` ('' or '/robot1')."""

    task: str = "robot"
    namespace: str = ""
    joint_states_topic: str = "/joint_states"
    joint_names: tuple[str, ...] = ("x", "y", "z", "finger_left", "finger_right")
    state_layout: str = "tabletop"
    image_topics: dict[str, str] = field(default_factory=dict)  # camera -> topic
    image_type: str = "sensor_msgs/msg/Image"
    image_size: tuple[int, int] = (64, 64)  # the policy's (H, W)
    camera: dict[str, Any] | None = None  # CameraTransform keys: crop, interpolation, roi (camera.py)
    privileged_topic: str | None = None
    privileged_dim: int = 0
    ee_pose_topic: str | None = None
    instruction: str = ""
    instruction_topic: str | None = None
    interface: str = "cmd"  # arm_commands.INTERFACES
    command_topic: str | None = None  # None: the interface's usual topic (arm_commands.DEFAULT_TOPICS)
    command_type: str = "std_msgs/msg/Float64MultiArray"  # interface "cmd" only
    frame_id: str = "base_link"  # the base frame of pose targets and twists
    ee_origin: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the policy frame's origin in the base frame
    ee_orientation: tuple[float, float, float, float] | None = None  # pose targets' (w, x, y, z); None: at reset
    gripper_topic: str | None = None
    gripper_type: str = "std_msgs/msg/Float64"
    gripper_open: float = 0.09  # the gripper's value (width m, or position) open (command -1) ...
    gripper_closed: float = 0.0  # ... and closed (+1); the twin's finger gap
    gripper_joints: tuple[str, ...] = ()  # joint_states names whose summed positions are the gripper's value
    action_dim: int = 4
    control_hz: float = 20.0
    sync: bool = True
    obs_timeout_s: float = 1.0
    max_episode_steps: int = 50
    reset: str = "topic"
    reset_topic: str = "/reset"
    reset_done_topic: str = "/reset_done"
    reset_service: str = "/reset"
    reset_timeout_s: float = 10.0
    success: str = "topic"
    success_topic: str = "/success"
    estop_topic: str = "/estop"
    transport: str = "auto"
    domain_id: int | None = None
    safety: SafetyConfig | None = field(default_factory=SafetyConfig)

    def __post_init__(self) -> None:
        _allowed("reset", self.reset, RESETS)
        _allowed("success", self.success, SUCCESSES)
        _allowed("state_layout", self.state_layout, LAYOUTS)
        _allowed("command_type", self.command_type, COMMAND_TYPES)
        _allowed("image_type", self.image_type, IMAGE_TYPES)
        if self.control_hz <= 0 or self.obs_timeout_s <= 0 or self.max_episode_steps < 1:
            raise EnvError("control_hz, obs_timeout_s, max_episode_steps: must be positive")
        if self.state_layout == "tabletop" and len(self.joint_names) != 5:
            raise EnvError(f"joint_names: the tabletop layout needs x, y, z, finger_left, finger_right; "
                           f"got {self.joint_names}")
        self._check_interface()
        if self.safety is not None and self.safety.action_dim != self.action_dim:
            raise EnvError(f"safety.action_dim: {self.safety.action_dim} != action_dim {self.action_dim}")
        if self.privileged_topic and self.privileged_dim < 1:
            raise EnvError("privileged_dim: must be set (> 0) with privileged_topic")
        try:
            self.camera_transform = cam_tf.CameraTransform.from_config(self.image_size, self.camera)
        except (cam_tf.CameraError, TypeError) as e:
            raise EnvError(str(e) if isinstance(e, cam_tf.CameraError) else f"camera: {e}") from None

    def _check_interface(self) -> None:
        _allowed("interface", self.interface, INTERFACES)
        _allowed("gripper_type", self.gripper_type, GRIPPER_TYPES)
        if self.command_topic is None:
            self.command_topic = DEFAULT_TOPICS[self.interface]
        mode = None if self.safety is None else self.safety.mode
        if self.state_layout == "ee_pose" and not self.ee_pose_topic:
            raise EnvError("ee_pose_topic: the ee_pose layout needs the arm's current pose (a PoseStamped topic)")
        if self.interface in CARTESIAN and (self.state_layout != "ee_pose" or mode == "joint"):
            raise EnvError(f"interface: {self.interface} needs state_layout ee_pose and EE-delta actions "
                           f"(safety.mode ee_delta); got {self.state_layout}, {mode}")
        if self.state_layout in ("joints", "arm") and self.interface != "cmd" and mode == "ee_delta":
            raise EnvError(f"safety.mode: the {self.state_layout} layout with interface {self.interface} "
                           f"takes joint targets: set mode joint with joint_low/high")
        if self.state_layout == "ee_pose" and self.interface not in CARTESIAN:
            raise EnvError(f"state_layout: ee_pose goes with interface {' or '.join(CARTESIAN)}, not {self.interface}")
        if self.state_layout == "arm":
            if self.action_dim != len(self.joint_names) + 1 or not self.gripper_topic:
                raise EnvError(f"action_dim, gripper_topic: the arm layout takes {len(self.joint_names)} joint "
                               f"targets and a gripper command (action_dim {len(self.joint_names) + 1}) and needs "
                               f"a gripper_topic; got action_dim {self.action_dim}, gripper_topic {self.gripper_topic}")
        elif self.interface != "cmd" and mode != "joint" and self.action_dim > 3 and not self.gripper_topic:
            raise EnvError(f"gripper_topic: interface {self.interface} sends the arm's command only; the "
                           f"action's gripper value needs a gripper_topic")
        if self.gripper_open == self.gripper_closed:
            raise EnvError("gripper_open, gripper_closed: must differ")
        if len(self.ee_origin) != 3 or (self.ee_orientation is not None and (
                len(self.ee_orientation) != 4 or abs(sum(q * q for q in self.ee_orientation) - 1.0) > 1e-3)):
            raise EnvError("ee_origin, ee_orientation: need x, y, z and a unit quaternion w, x, y, z")

    def topic(self, name: str) -> str:
        return f"{self.namespace.rstrip('/')}/{name.lstrip('/')}" if self.namespace else name


def robot_config_from_mapping(data: dict[str, Any], **overrides: Any) -> RobotEnvConfig:
    """A RobotEnvConfig from a mapping of its fields (a configs/robots/ YAML; `safety` a mapping of
    SafetyConfig fields, its action_dim and control_hz those of the robot), then overrides."""
    data = {**(data or {}), **overrides}
    fields = set(RobotEnvConfig.__dataclass_fields__)
    unknown = sorted(set(data) - fields)
    if unknown:
        raise EnvError(f"robot.{unknown[0]}: unknown field; allowed: {', '.join(sorted(fields))}")
    kw = {k: (tuple(v) if isinstance(v, list) else dict(v) if k == "image_topics" else v)
          for k, v in data.items() if k != "safety"}
    safety = data.get("safety", {})
    if isinstance(safety, dict):
        s = {k: (tuple(v) if isinstance(v, list) else v) for k, v in safety.items()}
        try:
            safety = SafetyConfig(**{"action_dim": kw.get("action_dim", 4), "control_hz": kw.get("control_hz", 20.0), **s})
        except TypeError as e:
            raise EnvError(f"robot.safety: {e}") from None
    try:
        return RobotEnvConfig(**kw, safety=safety)
    except TypeError as e:
        raise EnvError(f"robot: {e}") from None
