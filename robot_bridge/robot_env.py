"""RobotEnv: one ROS 2 robot behind the VecEnv contract (B = 1), behind the safety layer.

Observations (dict, B = 1):
  "state"       float32 [1, S]      from sensor_msgs/JointState. state_layout "tabletop": the
                                    MuJoCo suite's 9 values (TCP xyz = joints x, y, z; their
                                    velocities; finger gap = finger_left + finger_right; gap
                                    velocity; the last gripper command sent); "joints":
                                    positions then velocities of `joint_names` (S = 2 J)
  "privileged"  float32 [1, P]      std_msgs/Float64MultiArray (digital twins only), optional
  "ee_pose"     float32 [1, 7]      geometry_msgs/PoseStamped (xyz, qw qx qy qz), optional
  "rgb_<cam>"   uint8 [1, H, W, 3]  sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8, mono8) or
                                    CompressedImage (jpeg, png) of any size, brought to
                                    image_size (H, W) by `camera` (robot_bridge/camera.py:
                                    decode, roi, centre crop to the aspect, INTER_AREA resize)
  "instruction" list[str] of 1      from the config or a std_msgs/String topic
Actions float32 [1, A]: the safety filter makes a command of them against the newest
joint state (where the robot is now, even when a late reply left the observation behind),
published on `command_topic` as Float64MultiArray (the A values) or a one-point
JointTrajectory. Pacing: one command per 1 / control_hz. With `sync`, step waits for a joint
state newer (header stamp) than the newest one when the command was sent, so a stepped twin
and a robot streaming states both work, and a step after a late reply is back in lock step; a
command whose step timed out is answered (a newer state) before the next one is checked.
Episodes end on success (topic, classifier or operator) or after max_episode_steps; reset by
topic (std_msgs/Int64 seed, acknowledged on reset_done_topic), service (std_srvs/Trigger) or
operator prompt.
A received message that cannot be used (a joint state without the configured joints, lengths
that disagree, NaN or inf; a privileged vector of the wrong size; an image that does not fit
its encoding, or does not decode) is dropped with a logged warning, never raised: the last
good message stays the latest, and a timeout error names why the last one was dropped.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import torch

from robot_bridge import camera as cam_tf
from robot_bridge import ros_types as rt
from robot_bridge.robot_env_config import COMMAND_TYPES, RobotEnvConfig
from robot_bridge.safety import SafetyFilter
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS, Received, Transport
from robot_bridge.transport_factory import make_transport
from sims.vecenv import EnvError, EnvSpec, Obs, Seed, StepResult, VecEnv

FINGER_MAX = 0.045  # the MuJoCo gripper: gap command = 1 - gap / FINGER_MAX


def _dropped(sub: Any) -> str:
    """The tail of a timeout error: why the subscription's last message was dropped, if any."""
    return f"; {sub.rejected} ignored, the last because: {sub.last_rejection}" if sub.rejected else ""


def _check_pose(msg: Any) -> str | None:
    p, q = msg.pose.position, msg.pose.orientation
    return None if np.isfinite([p.x, p.y, p.z, q.w, q.x, q.y, q.z]).all() else "NaN or inf in the pose"


class RobotEnv(VecEnv):
    """A ROS 2 robot as a VecEnv with one env. success_fn: obs -> bool for success="classifier"."""

    def __init__(self, config: RobotEnvConfig, transport: Transport | None = None,
                 success_fn: Callable[[Obs], bool] | None = None):
        c = self.cfg = config
        if c.success == "classifier" and success_fn is None:
            raise EnvError("success: 'classifier' needs a success_fn")
        self.success_fn = success_fn
        S = 9 if c.state_layout == "tabletop" else 2 * len(c.joint_names)
        self.spec = EnvSpec(task=c.task, num_envs=1, action_dim=c.action_dim, state_dim=S,
                            privileged_dim=c.privileged_dim, max_episode_steps=c.max_episode_steps,
                            control_hz=c.control_hz, cameras=tuple(c.image_topics), image_size=tuple(c.image_size))
        self.tr = transport or make_transport(c.transport, c.domain_id, "robot_env")
        self._own_transport = transport is None
        self.safety = SafetyFilter(c.safety) if c.safety is not None else None
        t = c.topic
        self._js = self.tr.subscribe(t(c.joint_states_topic), "sensor_msgs/msg/JointState", SENSOR_QOS)
        self._images = {cam: self.tr.subscribe(t(top), c.image_type, SENSOR_QOS) for cam, top in c.image_topics.items()}
        self._priv = self.tr.subscribe(t(c.privileged_topic), "std_msgs/msg/Float64MultiArray", SENSOR_QOS) if c.privileged_topic else None
        self._pose = self.tr.subscribe(t(c.ee_pose_topic), "geometry_msgs/msg/PoseStamped", SENSOR_QOS) if c.ee_pose_topic else None
        self._instr = self.tr.subscribe(t(c.instruction_topic), "std_msgs/msg/String", SENSOR_QOS) if c.instruction_topic else None
        self._succ = self.tr.subscribe(t(c.success_topic), "std_msgs/msg/Bool", SENSOR_QOS) if c.success == "topic" else None
        self._reset_done = self.tr.subscribe(t(c.reset_done_topic), "std_msgs/msg/Int64", COMMAND_QOS) if c.reset == "topic" else None
        self._reset_pub = self.tr.publisher(t(c.reset_topic), "std_msgs/msg/Int64", COMMAND_QOS) if c.reset == "topic" else None
        self._cmd = self.tr.publisher(t(c.command_topic), c.command_type, COMMAND_QOS)
        self.tr.subscribe(t(c.estop_topic), "std_msgs/msg/Bool", COMMAND_QOS, callback=self._on_estop)
        self._js.check = self._check_joint_state
        if self._priv is not None:
            self._priv.check = self._check_privileged
        self.camera = c.camera_transform  # every frame: decode, crop, resize (robot_bridge/camera.py)
        self._frames: dict[str, tuple[Any, np.ndarray]] = {}  # camera -> (message, its transformed frame)
        for name, sub in self._images.items():
            sub.check = self._image_check(name)
        if self._pose is not None:
            self._pose.check = _check_pose
        self.commands_sent = 0
        self.last_command_time = float("nan")
        self._stamp = -1.0  # header stamp of the joint state the current obs was built from
        self._acted_on = -1.0  # header stamp of the newest joint state when the last command was sent
        self._unanswered = False  # sync: the last command's step timed out before the robot's answer came
        self.autoreset = True  # False: step() leaves a finished episode as it ended; the caller resets
        self._grip = 0.0
        self._elapsed = 0
        self._next_tick = 0.0
        self._obs: Obs | None = None

    # ------------------------------------------------------------------ e-stop
    def _on_estop(self, msg: Any) -> None:
        if msg.data and self.safety is not None:
            self.safety.estop("estop topic")

    # ------------------------------------------------------------------ message checks
    def _check_joint_state(self, js: Any) -> str | None:
        names = list(js.name)
        missing = [n for n in self.cfg.joint_names if n not in names]
        if missing:
            return f"missing joints {missing}; got {names}"
        if len(js.position) != len(names) or len(js.velocity) not in (0, len(names)):
            return f"{len(js.position)} positions and {len(js.velocity)} velocities for {len(names)} joints"
        idx = [names.index(n) for n in self.cfg.joint_names]
        values = np.concatenate([np.asarray(js.position, np.float64)[idx],
                                 np.asarray(js.velocity, np.float64)[idx] if len(js.velocity) else []])
        return None if np.isfinite(values).all() else "NaN or inf in positions or velocities"

    def _check_privileged(self, msg: Any) -> str | None:
        p = np.asarray(msg.data, np.float64)
        if p.size != self.cfg.privileged_dim:
            return f"expected {self.cfg.privileged_dim} values, got {p.size}"
        return None if np.isfinite(p).all() else "NaN or inf"

    def _image_check(self, name: str) -> Callable[[Any], str | None]:
        """A frame is usable when it decodes and transforms; the result is kept for _observe
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

    # ------------------------------------------------------------------ observations
    def _fresh_state(self, after_stamp: float) -> Received:
        """Wait for a joint state with a header stamp newer than after_stamp."""
        end = time.monotonic() + self.cfg.obs_timeout_s
        latest = self._js.latest()
        seq = latest.seq if latest else 0
        while latest is None or rt.stamp_seconds(latest.msg.header.stamp) <= after_stamp:
            left = end - time.monotonic()
            got = self._js.wait_newer(seq, left) if left > 0 else None
            if got is None:
                raise EnvError(f"robot: no new {self.cfg.topic(self.cfg.joint_states_topic)} within "
                               f"{self.cfg.obs_timeout_s:.1f} s (is the robot driver running on this domain?)"
                               + _dropped(self._js))
            latest, seq = got, got.seq
        return latest

    def _need(self, sub: Any, what: str) -> Received:
        got = sub.latest() or sub.wait_newer(0, self.cfg.obs_timeout_s)
        if got is None:
            raise EnvError(f"robot: nothing received on {sub.topic} ({what}) within {self.cfg.obs_timeout_s:.1f} s"
                           + _dropped(sub))
        return got

    def _state_vector(self, js: Any) -> np.ndarray:
        idx = {n: i for i, n in enumerate(js.name)}
        missing = [n for n in self.cfg.joint_names if n not in idx]
        if missing:
            raise EnvError(f"joint_states: missing joints {missing}; got {list(js.name)}")
        order = [idx[n] for n in self.cfg.joint_names]
        pos = np.asarray(js.position, np.float64)[order]
        vel = np.asarray(js.velocity, np.float64)[order] if len(js.velocity) == len(js.name) else np.zeros(len(order))
        if self.cfg.state_layout == "joints":
            return np.concatenate([pos, vel])
        return np.array([*pos[:3], *vel[:3], pos[3] + pos[4], vel[3] + vel[4], self._grip])

    def _observe(self, js: Received) -> Obs:
        c = self.cfg
        state = self._state_vector(js.msg)
        obs: Obs = {"state": torch.from_numpy(state.astype(np.float32))[None]}
        if self._priv is not None:
            p = rt.float64_array_values(self._need(self._priv, "privileged").msg).reshape(-1)
            if p.size != c.privileged_dim:
                raise EnvError(f"privileged: expected {c.privileged_dim} values, got {p.size}")
            obs["privileged"] = torch.from_numpy(p.astype(np.float32))[None]
        if self._pose is not None:
            ps = self._need(self._pose, "ee pose").msg.pose
            obs["ee_pose"] = torch.tensor([[ps.position.x, ps.position.y, ps.position.z, ps.orientation.w,
                                            ps.orientation.x, ps.orientation.y, ps.orientation.z]], dtype=torch.float32)
        for cam, sub in self._images.items():
            rgb = self._frame(cam, self._need(sub, "camera").msg)  # uint8 [H, W, 3]
            obs[f"rgb_{cam}"] = torch.from_numpy(rgb)[None]
        instr = c.instruction
        if self._instr is not None and self._instr.latest() is not None:
            instr = self._instr.latest().msg.data
        obs["instruction"] = [instr]
        self._stamp = rt.stamp_seconds(js.msg.header.stamp)
        n = 3 if c.state_layout == "tabletop" else len(c.joint_names)
        self._pos = state[:n].copy()  # float64 positions the safety filter checks against
        return obs

    # ------------------------------------------------------------------ reset
    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        if seed is not None and not isinstance(seed, int):
            seed = list(seed)[0]
        if self.safety is not None:  # the last episode's interventions, in one line
            self.safety.end_episode("last episode")
        c = self.cfg
        sent = time.monotonic()
        if c.reset == "topic":  # the state after the reset comes after the acknowledgement
            value = -1 if seed is None else int(seed)
            end, done = sent + c.reset_timeout_s, None
            while done is None and time.monotonic() < end:  # resend until acknowledged
                self._reset_pub.publish(rt.scalar("std_msgs/msg/Int64", value))
                done = self._reset_done.wait_after(sent, 0.25)
                if done is not None and done.msg.data != value:
                    done = None
            if done is None:
                raise EnvError(f"robot: reset not acknowledged on {c.topic(c.reset_done_topic)} within "
                               f"{c.reset_timeout_s:.1f} s (is the robot driver running on this domain?)")
            acked = done.recv_time
        elif c.reset == "service":
            req = rt.msg_class("std_srvs/srv/Trigger_Request")(structure_needs_at_least_one_member=0)
            resp = self.tr.call_service(c.topic(c.reset_service), "std_srvs/srv/Trigger", req, c.reset_timeout_s)
            if not resp.success:
                raise EnvError(f"robot: reset service refused: {resp.message}")
            acked = time.monotonic()
        else:
            input(f"[robot] reset the scene (seed {seed}), then press Enter: ")
            acked = time.monotonic()
        js = self._js.wait_after(acked, c.obs_timeout_s)
        if js is None:
            raise EnvError(f"robot: no {c.topic(c.joint_states_topic)} after reset within {c.obs_timeout_s:.1f} s"
                           + _dropped(self._js))
        gap = self._state_vector(js.msg)[6] if c.state_layout == "tabletop" else 0.0
        self._grip = float(np.clip(1.0 - gap / FINGER_MAX, -1.0, 1.0))
        if self.safety is not None:
            self.safety.hold_gripper = self._grip
        self._elapsed = 0
        self._unanswered = False
        self._obs = self._observe(js)
        return self._obs, {}

    # ------------------------------------------------------------------ stepping
    def _publish(self, cmd: np.ndarray) -> None:
        c = self.cfg
        if c.command_type == COMMAND_TYPES[0]:
            self._cmd.publish(rt.float64_array(cmd))
        else:
            self._cmd.publish(rt.joint_trajectory(c.joint_names[:len(cmd)], cmd[None], 1.0 / c.control_hz))
        self.commands_sent += 1
        self._unanswered = True  # until a state newer than _acted_on arrives (step's _fresh_state)
        self.last_command_time = time.monotonic()  # for latency: command sent - observation received

    def _position(self, js: Received) -> tuple[np.ndarray, float]:
        """float64 positions the safety filter checks against [3] (tabletop) or [J], and the stamp."""
        n = 3 if self.cfg.state_layout == "tabletop" else len(self.cfg.joint_names)
        return self._state_vector(js.msg)[:n], rt.stamp_seconds(js.msg.header.stamp)

    def _command(self, action: Any) -> None:
        """Filter and send one command at the next control tick; EnvError when none may be sent."""
        now = time.monotonic()
        if now < self._next_tick:
            time.sleep(self._next_tick - now)
        self._next_tick = max(now, self._next_tick) + 1.0 / self.cfg.control_hz
        if self.cfg.sync and self._unanswered:
            # the last command's answer did not come in time (a link fault); it may still arrive and
            # move the robot, so the next command waits for it: else its limits would be checked
            # against a state the robot has already left
            self._fresh_state(self._acted_on)
            self._unanswered = False
        latest = self._js.latest()
        self._acted_on = max(self._stamp, rt.stamp_seconds(latest.msg.header.stamp) if latest else -1.0)
        if self.safety is None:
            a = np.asarray(action, np.float64).reshape(-1)
            if a.shape != (self.cfg.action_dim,) or not np.isfinite(a).all():
                raise EnvError(f"action: expected {self.cfg.action_dim} finite values, got shape {a.shape}")
            return self._publish(a)
        end = time.monotonic() + self.cfg.obs_timeout_s
        while True:
            js = self._js.latest()
            age = time.monotonic() - js.recv_time if js is not None else float("inf")
            # the limits hold for where the robot is now: the newest joint state, which is newer than
            # the observation when a reply came late (a link fault), not the observation's position
            pos, stamp = (self._pos, self._stamp) if js is None else self._position(js)
            cmd = self.safety.filter(action, pos, obs_age=age)
            if cmd is not None:
                break
            if self.safety.estopped:
                raise EnvError("robot: e-stop engaged; no further commands (clear it on the robot, then restart)")
            if time.monotonic() > end:
                raise EnvError(f"robot: observations stale for {self.cfg.obs_timeout_s:.1f} s on "
                               f"{self.cfg.topic(self.cfg.joint_states_topic)}; commanding stopped")
            self._js.wait_newer(js.seq if js else 0, 1.0 / self.cfg.control_hz)
        if self.safety.estopped:  # an e-stop that arrived while filtering
            raise EnvError("robot: e-stop engaged; no further commands")
        self._acted_on = max(self._stamp, stamp)
        self._publish(cmd)
        if self.cfg.state_layout == "tabletop" and len(cmd) > 3:
            self._grip = float(cmd[3])

    def step(self, action: torch.Tensor) -> StepResult:
        if self._obs is None:
            raise EnvError("robot: call reset() before step()")
        act = action[0] if isinstance(action, torch.Tensor) and action.dim() == 2 and len(action) == 1 else action
        self._command(act)
        js = self._fresh_state(self._acted_on) if self.cfg.sync else self._js.latest()
        self._unanswered = False
        obs = self._observe(js)
        self._elapsed += 1
        success = self._success(obs)
        truncated = self._elapsed >= self.cfg.max_episode_steps and not success
        if truncated and self.cfg.success == "operator":
            success = input("[robot] episode over: success? [y/N] ").strip().lower().startswith("y")
        done = success or truncated
        t = lambda v: torch.tensor([v])  # noqa: E731
        info = {"success": t(bool(success))}
        res = StepResult(obs=obs, reward=t(float(success)), terminated=t(bool(success)),
                         truncated=t(bool(truncated and not success)), info=info, final_obs=obs if done else None)
        if done and self.autoreset:
            res.obs, _ = self.reset()
        self._obs = res.obs
        return res

    def step_past_end(self, action: torch.Tensor) -> Obs:
        """One more command, through the safety filter, and the frame after it, once an episode
        has ended (autoreset False) and before the reset: no success check, no time limit (the
        frames past success that embodied/robot_rl records for a success classifier)."""
        act = action[0] if isinstance(action, torch.Tensor) and action.dim() == 2 and len(action) == 1 else action
        self._command(act)
        js = self._fresh_state(self._acted_on) if self.cfg.sync else self._js.latest()
        self._unanswered = False
        self._obs = self._observe(js)
        return self._obs

    def _success(self, obs: Obs) -> bool:
        if self.cfg.success == "topic":
            got = self._succ.latest()
            return bool(got is not None and got.msg.data)
        if self.cfg.success == "classifier":
            return bool(self.success_fn(obs))
        return False

    def close(self) -> None:
        if self.safety is not None:
            self.safety.end_episode("last episode")
        if self._own_transport:
            self.tr.close()
