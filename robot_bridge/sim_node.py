"""Sim robot node: one MuJoCo task (num_envs = 1) as a ROS 2 robot driver (a digital twin).

Topics (under --namespace):
  publishes  /joint_states        sensor_msgs/JointState   x, y, z (TCP slides, m), finger_left,
                                                           finger_right (m); positions, velocities
             /camera/image_raw    sensor_msgs/Image rgb8   (unless --image-size 0)
             /privileged          std_msgs/Float64MultiArray  the task's privileged obs (twin extra)
             /success             std_msgs/Bool            the episode succeeded (twin extra)
             /instruction         std_msgs/String
             /reset_done          std_msgs/Int64           echoes a /reset once it took effect
  subscribes /cmd                 std_msgs/Float64MultiArray  4-d action: EE delta xyz, gripper
             /reset               std_msgs/Int64           seed (< 0: the node's own stream)
Every frame is published in this order, joint states last: privileged, success, instruction,
image, joint_states; all carry one header stamp (the time the physics state was reached).

Stepping: by default each command received advances the physics one control step and
publishes a frame (a twin in lock step with its controller, so results match simulation);
between commands the last frame is republished at --rate with its old stamp (a heartbeat).
With --free-run the node steps at --rate, using the newest command or holding. When an
episode ends the twin holds (commands publish frames but do not move it) until /reset.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from robot_bridge import ros_types as rt
from robot_bridge.cli_args import robot_sim_arguments
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS, make_transport
from sims.mujoco.env import MujocoVecEnv

JOINTS = MujocoVecEnv.JOINT_NAMES


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

    def topic(self, name: str) -> str:
        return f"{self.namespace.rstrip('/')}/{name.lstrip('/')}" if self.namespace else name


class SimRobotNode:
    def __init__(self, cfg: SimNodeConfig):
        from sims.registry import make_env

        self.cfg = cfg
        rgb = cfg.image_size > 0
        self.env = make_env(cfg.task, 1, obs_mode="rgb" if rgb else "state", cameras=(cfg.camera,),
                            image_size=(max(cfg.image_size, 8),) * 2, num_threads=1, seed=cfg.seed,
                            reality=cfg.reality)
        self.tr = make_transport(cfg.transport, cfg.domain_id, "sim_robot")
        t = cfg.topic
        self.pub_js = self.tr.publisher(t("/joint_states"), "sensor_msgs/msg/JointState", SENSOR_QOS)
        self.pub_img = self.tr.publisher(t("/camera/image_raw"), "sensor_msgs/msg/Image", SENSOR_QOS) if rgb else None
        self.pub_priv = self.tr.publisher(t("/privileged"), "std_msgs/msg/Float64MultiArray", SENSOR_QOS)
        self.pub_succ = self.tr.publisher(t("/success"), "std_msgs/msg/Bool", SENSOR_QOS)
        self.pub_instr = self.tr.publisher(t("/instruction"), "std_msgs/msg/String", SENSOR_QOS)
        self.pub_done = self.tr.publisher(t("/reset_done"), "std_msgs/msg/Int64", COMMAND_QOS)
        self.wake = threading.Event()
        self.cmd = self.tr.subscribe(t("/cmd"), "std_msgs/msg/Float64MultiArray", COMMAND_QOS,
                                     callback=lambda m: self.wake.set())
        self.reset_sub = self.tr.subscribe(t("/reset"), "std_msgs/msg/Int64", COMMAND_QOS,
                                           callback=lambda m: self.wake.set())
        self.stop = threading.Event()
        self.steps = 0
        self.rejected = 0  # commands that were not 4 finite values
        self._reset(cfg.seed)

    def _reset(self, seed: int | None) -> None:
        self.obs, _ = self.env.reset(seed=seed)
        self.success, self.finished = False, False
        self.stamp = time.time()

    def _joint_state(self) -> tuple[np.ndarray, np.ndarray]:
        pos, vel = self.env.joint_state()
        return pos[0], vel[0]

    def publish_frame(self) -> None:
        t = self.stamp
        self.pub_priv.publish(rt.float64_array(self.obs["privileged"][0].double().numpy()))
        self.pub_succ.publish(rt.scalar("std_msgs/msg/Bool", bool(self.success)))
        self.pub_instr.publish(rt.scalar("std_msgs/msg/String", self.obs["instruction"][0]))
        if self.pub_img is not None:
            self.pub_img.publish(rt.image(self.obs[f"rgb_{self.cfg.camera}"][0].numpy(), frame_id=self.cfg.camera, t=t))
        pos, vel = self._joint_state()
        self.pub_js.publish(rt.joint_state(JOINTS, pos, vel, frame_id="world", t=t))

    def _step(self, action: np.ndarray | None) -> None:
        if action is not None and not self.finished:
            res = self.env.step(torch.tensor(np.array(action), dtype=torch.float32)[None])
            self.steps += 1
            if bool(res.done[0]):
                self.obs = res.final_obs  # the robot stays where the episode ended
                self.success, self.finished = bool(res.info["success"][0]), True
            else:
                self.obs = res.obs
        self.stamp = time.time()

    def _command(self, msg) -> np.ndarray | None:
        a = np.asarray(msg.data, np.float64).reshape(-1)
        if a.shape != (4,) or not np.isfinite(a).all():
            self.rejected += 1
            return None
        return a

    def spin(self, duration: float | None = None) -> None:
        """Serve until stop is set (or duration seconds pass)."""
        period = 1.0 / self.cfg.rate_hz
        end = None if duration is None else time.monotonic() + duration
        last_cmd, last_reset = 0, 0
        hold = np.zeros(4)
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
            c = self.cmd.latest()
            fresh = c is not None and c.seq > last_cmd
            if fresh:
                last_cmd = c.seq
            if self.cfg.free_run:
                if time.monotonic() < next_tick:
                    continue
                a = self._command(c.msg) if fresh else None
                if a is not None:
                    hold[3] = a[3]
                self._step(a if a is not None else hold.copy())
                self.publish_frame()
            elif fresh:
                self._step(self._command(c.msg))
                self.publish_frame()
            elif time.monotonic() >= next_tick:
                self.publish_frame()  # heartbeat: same state, same stamp
            if time.monotonic() >= next_tick:
                next_tick = max(next_tick + period, time.monotonic() - period)

    def close(self) -> None:
        self.stop.set()
        self.tr.close()
        self.env.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="embodied robot-sim", description="a MuJoCo task as a ROS 2 robot")
    robot_sim_arguments(p)
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    """`embodied robot-sim`: serve until SIGINT/SIGTERM."""
    if args.rate <= 0:
        raise SystemExit("embodied robot-sim: error: --rate: must be > 0")
    cfg = SimNodeConfig(task=args.task, rate_hz=args.rate, image_size=args.image_size, camera=args.camera,
                        namespace=args.namespace, seed=args.seed, free_run=args.free_run,
                        transport=args.transport, domain_id=args.domain_id,
                        reality=getattr(args, "reality", None))
    from robot_bridge.ros_types import MessageError
    from robot_bridge.transport import TransportError
    from sims.vecenv import EnvError

    try:
        node = SimRobotNode(cfg)
    except (TransportError, MessageError) as e:
        raise EnvError(str(e)) from None
    signal.signal(signal.SIGTERM, lambda *_: node.stop.set())
    print(f"robot-sim: {cfg.task} on domain {node.tr.domain_id} ({node.tr.name}), "
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
