"""RobotEnvConfig: what RobotEnv (robot_bridge/robot_env.py) connects to and how, checked when made:
topics, message types, the state layout, camera handling, pacing, how episodes reset and end,
and the safety limits. A bad field is one EnvError naming it and what is allowed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from robot_bridge import camera as cam_tf
from robot_bridge.safety import SafetyConfig
from sims.vecenv import EnvError

RESETS, SUCCESSES, LAYOUTS = ("topic", "service", "operator"), ("topic", "classifier", "operator"), ("tabletop", "joints")
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
    command_topic: str = "/cmd"
    command_type: str = "std_msgs/msg/Float64MultiArray"
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
        if self.safety is not None and self.safety.action_dim != self.action_dim:
            raise EnvError(f"safety.action_dim: {self.safety.action_dim} != action_dim {self.action_dim}")
        if self.privileged_topic and self.privileged_dim < 1:
            raise EnvError("privileged_dim: must be set (> 0) with privileged_topic")
        try:
            self.camera_transform = cam_tf.CameraTransform.from_config(self.image_size, self.camera)
        except (cam_tf.CameraError, TypeError) as e:
            raise EnvError(str(e) if isinstance(e, cam_tf.CameraError) else f"camera: {e}") from None

    def topic(self, name: str) -> str:
        return f"{self.namespace.rstrip('/')}/{name.lstrip('/')}" if self.namespace else name
