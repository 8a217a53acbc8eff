"""Sim robot node: one MuJoCo task (num_envs = 1) as a ROS 2 robot driver (a digital twin).

Topics (under --namespace):
  publishes  /joint_states        sensor_msgs/JointState   x, y, z (TCP slides, m), finger_left,
                                                           finger_right (m); positions, velocities
             /camera/image_raw    sensor_msgs/Image rgb8   every camera of the task (unless --image-size
             /camera/camera_info  sensor_msgs/CameraInfo   0), at camera_topic(name): front here, the
             /camera/<name>/...                            others (wrist) under /camera/<name>/; the
                                                           info: the MuJoCo camera's pinhole intrinsics
             /current_pose        geometry_msgs/PoseStamped  the TCP (= joints x, y, z) in frame world
             /privileged          std_msgs/Float64MultiArray  the task's privileged obs (twin extra)
             /success             std_msgs/Bool            the episode succeeded (twin extra)
             /instruction         std_msgs/String
             /reset_done          std_msgs/Int64           echoes a /reset once it took effect
  subscribes /cmd                 std_msgs/Float64MultiArray  4-d action: EE delta xyz, gripper
                                  or, with --interface (robot_bridge/arm_commands.py's messages):
             /target_pose         pose: a PoseStamped TCP target; the step moves towards it
             /servo_node/delta_twist_cmds  twist: a TwistStamped (m/s), held for one control step
             /joint_trajectory_controller/joint_trajectory  trajectory: joints x, y, z; each point
                                  one control step towards it (a new trajectory replaces the rest)
             /gripper/command     std_msgs/Float64 finger gap (m, 0.09 open .. 0 closed), with those
             /reset               std_msgs/Int64           seed (< 0: the node's own stream)
  serves     /reset               std_srvs/srv/Trigger     reset from the node's own seed stream;
                                                           answers once the reset took effect
Every frame is published in this order, joint states last: privileged, success, instruction,
images, camera infos, current pose, joint states; all carry one header stamp (the time the physics state was
reached) and show one physics state: at an episode's end, its final state.
QoS: state topics (joint states, privileged, success, instruction) reliable, keep last 10,
as ros2_control's joint_state_broadcaster; camera topics best effort (sensor data).

Stepping: by default each command received advances the physics one control step and
publishes a frame, in the order received (a twin in lock step with its controller, so results
match simulation); between commands the last frame is republished at --rate with its old stamp
(a heartbeat). With --free-run the node steps at --rate, using the newest command (older ones
of a burst are dropped, as a forward command controller does) or holding. When an episode ends
the twin holds (commands publish frames but do not move it) until a reset. A command that is
not 4 values finite in float32 is ignored with a logged warning; the simulator clips values to
[-1, 1].
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from robot_bridge import ros_types as rt
from robot_bridge.arm_commands import pose_stamped, pose_values
from robot_bridge.cli_args import robot_sim_arguments
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS, QosProfile
from robot_bridge.transport_factory import make_transport
from sims.mujoco.control import EE_STEP
from sims.mujoco.env import CAMERAS, MujocoVecEnv
from sims.vecenv import EnvError

JOINTS = MujocoVecEnv.JOINT_NAMES
STATE_QOS = QosProfile(reliable=True, depth=10)  # joint_state_broadcaster publishes reliable
MAX_QUEUED = 1000  # commands waiting to be stepped (lock step); older ones are dropped beyond
log = logging.getLogger("robot_bridge.sim_node")
INTERFACE_TOPICS = {"pose": ("/target_pose", "geometry_msgs/msg/PoseStamped"),
                    "twist": ("/servo_node/delta_twist_cmds", "geometry_msgs/msg/TwistStamped"),
                    "trajectory": ("/joint_trajectory_controller/joint_trajectory", "trajectory_msgs/msg/JointTrajectory")}
FINGER_MAX = 0.045  # the MuJoCo gripper: command g = 1 - gap / FINGER_MAX


def camera_topic(cam: str, what: str = "image_raw") -> str:
    """The twin's topic of a camera: front on /camera/image_raw, the others on /camera/<cam>/image_raw
    (what: image_raw or camera_info)."""
    return f"/camera/{what}" if cam == "front" else f"/camera/{cam}/{what}"


@dataclass
class SimNodeConfig:
    task: str = "Reach"
    rate_hz: float = 20.0
    image_size: int = 64  # 0: no camera topic
    camera: str = "front"
    namespace: str = ""
    seed: int = 0
    free_run: bool = False
    transport: str = "auto"
    domain_id: int | None = None
    reality: str | None = None  # reality preset (configs/reality/ name or path): the twin's gap
    interface: str = "cmd"  # cmd, pose, twist, trajectory (INTERFACE_TOPICS)

    def topic(self, name: str) -> str:
        return f"{self.namespace.rstrip('/')}/{name.lstrip('/')}" if self.namespace else name


class SimRobotNode:
    def __init__(self, cfg: SimNodeConfig):
        from sims.registry import make_env

        self.cfg = cfg
        rgb = cfg.image_size > 0
        self.cameras = CAMERAS if rgb else ()
        self.env = make_env(cfg.task, 1, obs_mode="rgb" if rgb else "state", cameras=CAMERAS,
                            image_size=(max(cfg.image_size, 8),) * 2, num_threads=1, seed=cfg.seed,
                            reality=cfg.reality)
        self.tr = make_transport(cfg.transport, cfg.domain_id, "sim_robot")
        t = cfg.topic
        self.pub_js = self.tr.publisher(t("/joint_states"), "sensor_msgs/msg/JointState", STATE_QOS)
        self.pub_img = {cam: self.tr.publisher(t(camera_topic(cam)), "sensor_msgs/msg/Image", SENSOR_QOS) for cam in self.cameras}
        self.pub_info = {cam: self.tr.publisher(t(camera_topic(cam, "camera_info")), "sensor_msgs/msg/CameraInfo", SENSOR_QOS)
                         for cam in self.cameras}
        self.pub_pose = self.tr.publisher(t("/current_pose"), "geometry_msgs/msg/PoseStamped", STATE_QOS)
        self.pub_priv = self.tr.publisher(t("/privileged"), "std_msgs/msg/Float64MultiArray", STATE_QOS)
        self.pub_succ = self.tr.publisher(t("/success"), "std_msgs/msg/Bool", STATE_QOS)
        self.pub_instr = self.tr.publisher(t("/instruction"), "std_msgs/msg/String", STATE_QOS)
        self.pub_done = self.tr.publisher(t("/reset_done"), "std_msgs/msg/Int64", COMMAND_QOS)
        self.wake = threading.Event()
        self.commands: collections.deque = collections.deque(maxlen=MAX_QUEUED)
        self.grip = -1.0  # the gripper command held for pose, twist and trajectory steps
        if cfg.interface == "cmd":
            self.tr.subscribe(t("/cmd"), "std_msgs/msg/Float64MultiArray", COMMAND_QOS, callback=self._on_command)
        else:
            topic, msg_type = INTERFACE_TOPICS[cfg.interface]
            self.tr.subscribe(t(topic), msg_type, COMMAND_QOS, callback=self._on_arm_command)
            self.tr.subscribe(t("/gripper/command"), "std_msgs/msg/Float64", COMMAND_QOS, callback=self._on_gripper)
        self.reset_sub = self.tr.subscribe(t("/reset"), "std_msgs/msg/Int64", COMMAND_QOS,
                                           callback=lambda m: self.wake.set())
        self._reset_calls: collections.deque = collections.deque()  # events of waiting service calls
        self.tr.serve(t("/reset"), "std_srvs/srv/Trigger", self._on_reset_call)
        self.stop = threading.Event()
        self.steps = 0
        self.episodes = 0
        self.rejected = 0  # commands that were not 4 values finite in float32
        self._reset(cfg.seed)

    # ------------------------------------------------------------------ inputs
    def _on_command(self, msg) -> None:
        self.commands.append(msg)
        self.wake.set()

    def _on_arm_command(self, msg) -> None:
        """A pose target, twist or trajectory -> queued entries ("target", xyz) or ("delta", EE delta
        in action units); each is one control step (receive thread: no physics here)."""
        kind = self.cfg.interface
        if kind == "pose":
            entries = [("target", pose_values(msg)[:3])]
        elif kind == "twist":
            v = msg.twist.linear
            entries = [("delta", np.array([v.x, v.y, v.z]) / self.env.spec.control_hz / EE_STEP)]
        else:
            names = list(msg.joint_names)
            if not {"x", "y", "z"} <= set(names):
                return self._reject(f"trajectory joints {names}; expected x, y, z")
            idx = [names.index(n) for n in ("x", "y", "z")]
            entries = [("target", np.asarray(p.positions, np.float64)[idx]) for p in msg.points]
            if self.cfg.free_run:
                self.commands.clear()  # a new trajectory replaces what was left of the last
        for e in entries:
            if np.isfinite(e[1]).all():
                self.commands.append(e)
            else:
                self._reject(f"not finite: {e[1].tolist()}")
        self.wake.set()

    def _on_gripper(self, msg) -> None:
        if np.isfinite(msg.data):
            self.grip = float(np.clip(1.0 - msg.data / FINGER_MAX, -1.0, 1.0))

    def _on_reset_call(self, request):
        """The /reset service (runs on the transport's service thread): the spin loop resets."""
        done = threading.Event()
        self._reset_calls.append(done)
        self.wake.set()
        ok = done.wait(10.0) and not self.stop.is_set()
        return rt.msg_class("std_srvs/srv/Trigger_Response")(
            success=bool(ok), message=f"episode {self.episodes}" if ok else "robot-sim: reset did not happen")

    def _command(self, msg) -> np.ndarray | None:
        """A command's 4 values as float32, or None (ignored, logged) if it is not 4 values
        finite in float32 (1e39 is finite in float64 but inf in float32). A queued pose, twist or
        trajectory entry becomes the EE delta towards its target (or its delta) and the held gripper."""
        if isinstance(msg, tuple):
            kind, v = msg
            d = (v - self.js[0][:3]) / EE_STEP if kind == "target" else v
            return np.array([*np.clip(d, -1.0, 1.0), self.grip], np.float32)
        a = np.asarray(msg.data, np.float64).reshape(-1)
        with np.errstate(over="ignore", invalid="ignore"):
            a32 = a.astype(np.float32)
        if a32.shape == (4,) and np.isfinite(a32).all():
            return a32
        why = f"{a.size} values" if a.shape != (4,) else f"not finite in float32: {a.tolist()}"
        self._reject(f"{why}; expected 4 values finite in float32")
        return None

    def _reject(self, why: str) -> None:
        self.rejected += 1
        n = self.rejected
        if n <= 10 or (n & (n - 1)) == 0:  # the first ten, then at powers of two
            log.warning("robot-sim: command #%d on %s ignored (%s)", n, self.cfg.topic("/cmd"), why)

    # ------------------------------------------------------------------ the physics
    def _reset(self, seed: int | None) -> None:
        self.obs, _ = self.env.reset(seed=seed)
        self.js = self._joint_state()
        self.success, self.finished = False, False
        self.episodes += 1
        self.stamp = time.time()

    def _joint_state(self) -> tuple[np.ndarray, np.ndarray]:
        pos, vel = self.env.joint_state()
        return pos[0].copy(), vel[0].copy()

    def _step(self, action: np.ndarray | None) -> None:
        if action is not None and not self.finished:
            try:
                res = self.env.step(torch.from_numpy(np.array(action, np.float32))[None])
            except EnvError as e:  # a last line of defence: a command never ends the node
                self._reject(str(e))
                res = None
            if res is not None:
                self.steps += 1
                if bool(res.done[0]):
                    # MujocoVecEnv resets a finished episode inside step(); its final_joint_state is
                    # the state the episode ended in, so that the final frame is one physics snapshot
                    pos, vel = self.env.final_joint_state
                    self.obs, self.js = res.final_obs, (pos[0].copy(), vel[0].copy())
                    self.success, self.finished = bool(res.info["success"][0]), True
                else:
                    self.obs, self.js = res.obs, self._joint_state()
        self.stamp = time.time()

    def _camera_info(self, cam: str, t: float):
        import mujoco

        model = self.env.model
        cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, cam)
        fovy = float(model.cam_fovy[cam_id])
        dr = getattr(self.env, "_dr", None)  # a --reality preset may widen or narrow the camera
        if dr is not None and dr.r.has("camera_fovy"):
            fovy += float(dr.params["camera_fovy"][0])
        side = self.cfg.image_size
        return rt.camera_info(side, side, fovy, frame_id=cam, t=t)

    def publish_frame(self) -> None:
        t = self.stamp
        self.pub_priv.publish(rt.float64_array(self.obs["privileged"][0].double().numpy()))
        self.pub_succ.publish(rt.scalar("std_msgs/msg/Bool", bool(self.success)))
        self.pub_instr.publish(rt.scalar("std_msgs/msg/String", self.obs["instruction"][0]))
        for cam in self.cameras:
            self.pub_img[cam].publish(rt.image(self.obs[f"rgb_{cam}"][0].numpy(), frame_id=cam, t=t))
            self.pub_info[cam].publish(self._camera_info(cam, t))
        pos, vel = self.js
        self.pub_pose.publish(pose_stamped(pos[:3], np.array([1.0, 0.0, 0.0, 0.0]), "world", t=t))
        self.pub_js.publish(rt.joint_state(JOINTS, pos, vel, frame_id="world", t=t))

    # ------------------------------------------------------------------ the loop
    def spin(self, duration: float | None = None) -> None:
        """Serve until stop is set (or duration seconds pass)."""
        period = 1.0 / self.cfg.rate_hz
        end = None if duration is None else time.monotonic() + duration
        last_reset = 0
        hold = np.zeros(4, np.float32)
        next_tick = time.monotonic()
        self.publish_frame()
        while not self.stop.is_set() and (end is None or time.monotonic() < end):
            self.wake.wait(max(0.0, next_tick - time.monotonic()))
            self.wake.clear()
            r = self.reset_sub.latest()
            if r is not None and r.seq > last_reset:
                last_reset = r.seq
                self._reset(None if r.msg.data < 0 else int(r.msg.data))
                self.pub_done.publish(rt.scalar("std_msgs/msg/Int64", int(r.msg.data)))
                self.publish_frame()
                next_tick = time.monotonic() + period
                continue
            if self._reset_calls:
                self._reset(None)
                self.publish_frame()
                self._reset_calls.popleft().set()
                next_tick = time.monotonic() + period
                continue
            if self.cfg.free_run:
                if time.monotonic() < next_tick:
                    continue
                a = None
                if self.commands:  # the newest command; the older ones of a burst are dropped
                    newest = self.commands.pop()
                    self.commands.clear()
                    a = self._command(newest)
                if a is not None:
                    hold[3] = a[3]
                elif self.cfg.interface != "cmd":
                    hold[3] = self.grip
                self._step(a if a is not None else hold.copy())
                self.publish_frame()
            elif self.commands:
                while self.commands:  # lock step: every command one control step, in order
                    self._step(self._command(self.commands.popleft()))
                    self.publish_frame()
            elif time.monotonic() >= next_tick:
                self.publish_frame()  # heartbeat: same state, same stamp
            if time.monotonic() >= next_tick:
                next_tick = max(next_tick + period, time.monotonic() - period)

    def close(self) -> None:
        self.stop.set()
        while self._reset_calls:
            self._reset_calls.popleft().set()
        self.tr.close()
        self.env.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="embodied robot-sim", description="a MuJoCo task as a ROS 2 robot")
    robot_sim_arguments(p)
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    """`embodied robot-sim`: serve until SIGINT/SIGTERM."""
    if args.rate <= 0:
        print(f"embodied robot-sim: error: --rate: {args.rate} is not allowed; allowed: > 0 (Hz)", file=sys.stderr)
        return 2
    cfg = SimNodeConfig(task=args.task, rate_hz=args.rate, image_size=args.image_size, camera=args.camera,
                        namespace=args.namespace, seed=args.seed, free_run=args.free_run,
                        transport=args.transport, domain_id=args.domain_id,
                        reality=getattr(args, "reality", None), interface=getattr(args, "interface", "cmd"))
    from robot_bridge.ros_types import MessageError
    from robot_bridge.transport import TransportError

    logging.basicConfig(format="%(levelname)s %(message)s")  # warnings of ignored commands on stderr
    try:
        node = SimRobotNode(cfg)
    except (TransportError, MessageError) as e:
        raise EnvError(str(e)) from None
    for sig in (signal.SIGTERM, signal.SIGINT):  # end the spin loop between ticks, not inside one
        signal.signal(sig, lambda *_: node.stop.set())
    print(f"robot-sim: {cfg.task} on domain {node.tr.domain_id} ({node.tr.name}), interface {cfg.interface}, "
          f"{'free-run' if cfg.free_run else 'stepped per command'}", flush=True)
    try:
        node.spin(args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        node.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MUJOCO_GL", "egl")
    from sims.vecenv import EnvError

    try:
        sys.exit(run(parse_args()))
    except EnvError as e:
        print(f"embodied robot-sim: error: {e}", file=sys.stderr)
        sys.exit(2)
