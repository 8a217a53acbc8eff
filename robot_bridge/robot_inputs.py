"""RobotInputs: what RobotEnv (robot_bridge/robot_env.py) reads from the robot, and the
observation it builds of it.

Observations (dict, B = 1):
  "state"       float32 [1, S]      per state_layout (robot_bridge/robot_state.py): "tabletop"
                                    (the MuJoCo suite's 9 from JointState x, y, z, fingers),
                                    "joints" (2 J), "ee_pose" (the same 9 from a PoseStamped),
                                    "arm" (2 J + 2: joints and a gripper)
  "privileged"  float32 [1, P]      std_msgs/Float64MultiArray (digital twins only), optional
  "ee_pose"     float32 [1, 7]      geometry_msgs/PoseStamped (xyz, qw qx qy qz), optional
  "rgb_<cam>"   uint8 [1, H, W, 3]  sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8, mono8) or
                                    CompressedImage (jpeg, png) of any size, brought to
                                    image_size (H, W) by `camera` (robot_bridge/camera.py:
                                    decode, roi, centre crop to the aspect, INTER_AREA resize)
  "instruction" list[str] of 1      from the config or a std_msgs/String topic
In the ee_pose layout the newest PoseStamped plays the joint state's part (`js`). After a reset
every topic is read from messages received after the acknowledgement (an instruction topic:
the one received within INSTRUCTION_WAIT_S, else the latest), so no part of the first
observation is from the episode before. A received message that cannot be used (a joint state
without the configured joints, lengths that disagree, NaN or inf; a privileged vector of the
wrong size; an image that does not fit its encoding, or does not decode) is dropped with a
logged warning, never raised: the last good message stays the latest, and a timeout error
names why the last one was dropped.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import torch

from robot_bridge import camera as cam_tf
from robot_bridge import ros_types as rt
from robot_bridge.robot_env_config import RobotEnvConfig
from robot_bridge.robot_state import StateReader, check_pose
from robot_bridge.transport import SENSOR_QOS, Received, Transport
from sims.vecenv import EnvError, Obs

INSTRUCTION_WAIT_S = 0.5  # after a reset, how long an instruction topic may take to give the episode's own


def dropped(sub: Any) -> str:
    """The tail of a timeout error: why the subscription's last message was dropped, if any."""
    return f"; {sub.rejected} ignored, the last because: {sub.last_rejection}" if sub.rejected else ""


class RobotInputs:
    """The subscriptions of config c's topics on transport tr (state, gripper, cameras,
    privileged, EE pose, instruction, success), each with the check that drops unusable
    messages; st builds the state vector of the layout."""

    def __init__(self, c: RobotEnvConfig, tr: Transport, st: StateReader):
        self.cfg, self.st = c, st
        t = c.topic
        self.on_pose = st.on_pose  # the state (and the sync clock) comes from the pose
        self.js = (tr.subscribe(t(c.ee_pose_topic), "geometry_msgs/msg/PoseStamped", SENSOR_QOS, callback=st.track)
                   if self.on_pose else tr.subscribe(t(c.joint_states_topic), "sensor_msgs/msg/JointState", SENSOR_QOS))
        if self.on_pose and c.gripper_joints:
            st.grip_js = tr.subscribe(t(c.joint_states_topic), "sensor_msgs/msg/JointState", SENSOR_QOS)
        self.images = {cam: tr.subscribe(t(top), c.image_type, SENSOR_QOS) for cam, top in c.image_topics.items()}
        self.priv = tr.subscribe(t(c.privileged_topic), "std_msgs/msg/Float64MultiArray", SENSOR_QOS) if c.privileged_topic else None
        self.pose = (self.js if self.on_pose else tr.subscribe(t(c.ee_pose_topic), "geometry_msgs/msg/PoseStamped",
                                                               SENSOR_QOS)) if c.ee_pose_topic else None
        self.instr = tr.subscribe(t(c.instruction_topic), "std_msgs/msg/String", SENSOR_QOS) if c.instruction_topic else None
        self.succ = tr.subscribe(t(c.success_topic), "std_msgs/msg/Bool", SENSOR_QOS) if c.success == "topic" else None
        self.js.check = check_pose if self.on_pose else st.check_joint_state
        if self.priv is not None:
            self.priv.check = self._check_privileged
        self.camera = c.camera_transform  # every frame: decode, crop, resize (robot_bridge/camera.py)
        self._frames: dict[str, tuple[Any, np.ndarray]] = {}  # camera -> (message, its transformed frame)
        for name, sub in self.images.items():
            sub.check = self._image_check(name)
        if self.pose is not None:
            self.pose.check = check_pose

    # ------------------------------------------------------------------ message checks
    def _check_privileged(self, msg: Any) -> str | None:
        p = np.asarray(msg.data, np.float64)
        if p.size != self.cfg.privileged_dim:
            return f"expected {self.cfg.privileged_dim} values, got {p.size}"
        return None if np.isfinite(p).all() else "NaN or inf"

    def _image_check(self, name: str) -> Callable[[Any], str | None]:
        """A frame is usable when it decodes and transforms; the result is kept for observe
        (runs on the transport's receive thread, so the decoding happens once per frame)."""
        def check(msg: Any) -> str | None:
            try:
                self._frames[name] = (msg, self.camera(msg))
            except (cam_tf.CameraError, ValueError) as e:  # cv2.error is not one; caught below
                return str(e).removeprefix("image: ")
            except Exception as e:  # noqa: BLE001 (an OpenCV error on a hostile frame)
                return f"{type(e).__name__}: {str(e)[:120]}"
            return None
        return check

    def _frame(self, name: str, msg: Any) -> np.ndarray:
        got = self._frames.get(name)
        return got[1] if got is not None and got[0] is msg else self.camera(msg)

    # ------------------------------------------------------------------ reading
    def fresh_state(self, after_stamp: float) -> Received:
        """Wait for a joint state with a header stamp newer than after_stamp."""
        end = time.monotonic() + self.cfg.obs_timeout_s
        latest = self.js.latest()
        seq = latest.seq if latest else 0
        while latest is None or rt.stamp_seconds(latest.msg.header.stamp) <= after_stamp:
            left = end - time.monotonic()
            got = self.js.wait_newer(seq, left) if left > 0 else None
            if got is None:
                raise EnvError(f"robot: no new {self.js.topic} within "
                               f"{self.cfg.obs_timeout_s:.1f} s (is the robot driver running on this domain?)"
                               + dropped(self.js))
            latest, seq = got, got.seq
        return latest

    def _need(self, sub: Any, what: str, after: float | None = None) -> Received:
        """The latest message of sub; after a reset (after: the acknowledgement's receive time) the
        latest one received after it, so that no topic gives the state from before the reset."""
        if after is not None:
            got = sub.wait_after(after, self.cfg.obs_timeout_s)
        else:
            got = sub.latest() or sub.wait_newer(0, self.cfg.obs_timeout_s)
        if got is None:
            raise EnvError(f"robot: nothing received on {sub.topic} ({what}) within {self.cfg.obs_timeout_s:.1f} s"
                           + dropped(sub))
        return got

    def observe(self, js: Received, after: float | None = None) -> tuple[Obs, np.ndarray]:
        """The observation of joint state js and every other topic's latest message (received after
        `after`, the reset's acknowledgement, when given), and js's state vector float64 [S]."""
        c = self.cfg
        state = self.st.vector(js.msg)
        obs: Obs = {"state": torch.from_numpy(state.astype(np.float32))[None]}
        if self.priv is not None:
            p = rt.float64_array_values(self._need(self.priv, "privileged", after).msg).reshape(-1)
            if p.size != c.privileged_dim:
                raise EnvError(f"privileged: expected {c.privileged_dim} values, got {p.size}")
            obs["privileged"] = torch.from_numpy(p.astype(np.float32))[None]
        if self.pose is not None:
            ps = self._need(self.pose, "ee pose", after).msg.pose
            obs["ee_pose"] = torch.tensor([[ps.position.x, ps.position.y, ps.position.z, ps.orientation.w,
                                            ps.orientation.x, ps.orientation.y, ps.orientation.z]], dtype=torch.float32)
        for cam, sub in self.images.items():
            rgb = self._frame(cam, self._need(sub, "camera", after).msg)  # uint8 [H, W, 3]
            obs[f"rgb_{cam}"] = torch.from_numpy(rgb)[None]
        instr = c.instruction
        if self.instr is not None and self.instr.latest() is not None:  # after a reset: the episode's own
            got = self.instr.wait_after(after, INSTRUCTION_WAIT_S) if after is not None else None
            instr = (got or self.instr.latest()).msg.data  # instruction if one comes within 0.5 s
        obs["instruction"] = [instr]
        return obs, state

    def success(self) -> bool:
        """The success topic's newest value (False before any)."""
        got = self.succ.latest()
        return bool(got is not None and got.msg.data)
