"""A scripted operator (`embodied robot-operator TASK`): the task's scripted expert takes over
when the policy strays, as a human with a teleop device would, over ROS 2 topics only.

Listens to the twin's /privileged (the state the expert needs and the progress it watches) and
publishes geometry_msgs/Twist on /teleop: linear xyz = the expert's EE displacement,
angular.z = its gripper command (map it with TeleopConfig's default fields). Per frame (a
joint state with a new header stamp) it reads the distance still to go: the norm of the
privileged observation's `progress_key` slice (goal_minus_tcp for Reach, goal_minus_cube for
the cube tasks). The policy strays when that distance has not shrunk by `min_progress` metres
over the last `window` frames; the operator then publishes the expert's action for each of the
next `takeover` frames (or until the episode ends) and stays out otherwise. Its takeovers are
counted in `takeovers`."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from robot_bridge import ros_types as rt
from robot_bridge.teleop import twist
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS

from robot_bridge.transport_factory import make_transport
log = logging.getLogger("robot_bridge.operator")


@dataclass
class OperatorConfig:
    task: str = "Reach"
    namespace: str = ""
    teleop_topic: str = "/teleop"
    window: int = 5
    min_progress: float = 0.01
    takeover: int = 5
    progress_key: str | None = None  # None: goal_minus_tcp, else goal_minus_cube
    transport: str = "auto"
    domain_id: int | None = None

    def topic(self, name: str) -> str:
        return f"{self.namespace.rstrip('/')}/{name.lstrip('/')}" if self.namespace else name


class TakeoverRule:
    """The operator's decision, frame by frame: `frame(priv)` with the privileged observation
    float [P] of each new frame returns the expert's action float64 [A] while the operator is in
    control, else None; `reset()` at every new episode. Used by the node below and, in process,
    by embodied/robot_rl/sim_robot.py."""

    def __init__(self, task: str, window: int = 5, min_progress: float = 0.01, takeover: int = 5,
                 progress_key: str | None = None):
        from sims.mujoco.tasks.registry import task_class
        from sims.registry import expert_for

        self.expert = expert_for(task)
        layout = task_class(task).layout
        key = progress_key or ("goal_minus_tcp" if "goal_minus_tcp" in layout else "goal_minus_cube")
        if key not in layout:
            raise ValueError(f"progress_key: {key!r} is not in {task}'s layout; allowed: {', '.join(layout)}")
        self.progress, self.min_progress, self.takeover = layout[key], min_progress, takeover
        self.dist: deque[float] = deque(maxlen=window + 1)  # distance to go, the last frames
        self.left = 0  # frames of the current takeover still to come
        self.takeovers = 0

    def reset(self) -> None:
        self.dist.clear()
        self.left = 0

    def frame(self, priv: np.ndarray) -> np.ndarray | None:
        priv = np.asarray(priv, np.float64).reshape(1, -1)
        self.dist.append(float(np.linalg.norm(priv[0, self.progress])))
        if self.left == 0 and len(self.dist) == self.dist.maxlen and self.dist[-1] > self.dist[0] - self.min_progress:
            self.left, self.takeovers = self.takeover, self.takeovers + 1
        if self.left == 0:
            return None
        self.left -= 1
        return self.expert(priv)[0].astype(np.float64)


class ScriptedOperator:
    def __init__(self, cfg: OperatorConfig):
        self.cfg = cfg
        self.rule = TakeoverRule(cfg.task, cfg.window, cfg.min_progress, cfg.takeover, cfg.progress_key)
        self.tr = make_transport(cfg.transport, cfg.domain_id, "scripted_operator")
        t = cfg.topic
        self.pub = self.tr.publisher(t(cfg.teleop_topic), "geometry_msgs/msg/Twist", COMMAND_QOS)
        self.priv = self.tr.subscribe(t("/privileged"), "std_msgs/msg/Float64MultiArray", SENSOR_QOS)
        self.tr.subscribe(t("/reset_done"), "std_msgs/msg/Int64", COMMAND_QOS, callback=self._on_reset)
        self.frames = self.tr.subscribe(t("/joint_states"), "sensor_msgs/msg/JointState", SENSOR_QOS)
        self._lock = threading.Lock()
        self.stop = threading.Event()

    @property
    def takeovers(self) -> int:
        return self.rule.takeovers

    def _on_reset(self, msg) -> None:
        with self._lock:
            self.rule.reset()

    def on_frame(self) -> None:
        """One new frame: judge the progress, then publish the expert's action if in control."""
        got = self.priv.latest()
        if got is None:
            return
        with self._lock:
            action = self.rule.frame(rt.float64_array_values(got.msg))
        if action is not None:
            self.pub.publish(twist([*action[:3], 0.0, 0.0, action[3]]))

    def spin(self) -> None:
        last_stamp, seq = -1.0, 0
        while not self.stop.is_set():
            got = self.frames.wait_newer(seq, 0.2)
            if got is None:
                continue
            seq = got.seq
            stamp = rt.stamp_seconds(got.msg.header.stamp)
            if stamp > last_stamp:  # heartbeats repeat the old stamp
                last_stamp = stamp
                self.on_frame()

    def close(self) -> None:
        self.tr.close()


def check_arguments(args: argparse.Namespace) -> None:
    """One line naming the bad option and what is allowed (the CLI exits 2 on EnvError)."""
    from sims.vecenv import EnvError

    for name, value, ok, allowed in (("--window", args.window, args.window >= 1, "an integer >= 1"),
                                     ("--takeover", args.takeover, args.takeover >= 1, "an integer >= 1"),
                                     ("--min-progress", args.min_progress, args.min_progress >= 0, "metres >= 0"),
                                     ("--domain-id", args.domain_id, args.domain_id is None or 0 <= args.domain_id <= 232,
                                      "0..232")):
        if not ok:
            raise EnvError(f"{name}: {value} is not allowed; allowed: {allowed}")


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    if not log.handlers:  # this node's lines on stderr, not every library's INFO logging
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    op = ScriptedOperator(OperatorConfig(task=args.task, namespace=args.namespace, window=args.window,
                                         min_progress=args.min_progress, takeover=args.takeover,
                                         transport=args.transport, domain_id=args.domain_id))
    for sig in (signal.SIGTERM, signal.SIGINT):  # end the spin loop between frames, not inside a publish
        signal.signal(sig, lambda *_: op.stop.set())
    log.info("robot-operator: %s's expert on domain %s (%s), teleop topic %s", args.task, op.tr.domain_id,
             op.tr.name, op.cfg.topic(op.cfg.teleop_topic))
    try:
        op.spin()
    except KeyboardInterrupt:
        pass
    finally:
        log.info("robot-operator: %d takeovers", op.takeovers)
        op.close()
    return 0

