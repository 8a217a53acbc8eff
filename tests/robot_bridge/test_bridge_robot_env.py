"""RobotEnv over DDS on loopback: fuzzed commands checked by the receiver, watchdog, e-stop,
a robot node killed mid-episode, and a ROS-2-like fake robot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_bridge import ros_types as rt
from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
from robot_bridge.safety import SafetyConfig, SafetyFilter
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS
from robot_bridge.transport_factory import make_transport
from sims.vecenv import EnvError
from test_bridge_safety import TIGHT, fuzz_actions

ROOT = Path(__file__).resolve().parents[2]
SIM_BOX = (np.array([-0.25, -0.20, 0.015]), np.array([0.25, 0.20, 0.30]))


class FakeRobot:
    """A robot driver on its own participant: a TCP that moves by command * 0.02 m, a joint
    state after each command (stepped) or at `stream_hz`, and a receiver-side log of commands."""

    def __init__(self, checker: SafetyFilter | None = None, stream_hz: float = 0.0):
        self.tr = make_transport("dds", node_name="fake_robot")
        self.tcp = np.array([0.0, 0.0, 0.1])
        self.checker = checker
        self.received: list[tuple[float, np.ndarray]] = []
        self.violations: list[tuple[list[float], list[float]]] = []
        self.k = 0
        self.moved = False
        self._moved_lock = threading.Lock()  # a command that lands while publishing is not lost
        self.streaming = threading.Event()
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.pub = self.tr.publisher("/joint_states", "sensor_msgs/msg/JointState", SENSOR_QOS)
        self.done_pub = self.tr.publisher("/reset_done", "std_msgs/msg/Int64", COMMAND_QOS)
        self.estop_pub = self.tr.publisher("/estop", "std_msgs/msg/Bool", COMMAND_QOS)
        self.reset_sub = self.tr.subscribe("/reset", "std_msgs/msg/Int64", COMMAND_QOS, callback=lambda m: self.wake.set())
        self.tr.subscribe("/cmd", "std_msgs/msg/Float64MultiArray", COMMAND_QOS, callback=self._on_cmd)
        self.stream_hz = stream_hz
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _on_cmd(self, msg) -> None:
        a = np.asarray(msg.data, np.float64)
        self.received.append((time.monotonic(), a))
        if self.checker is not None and not self.checker.within_limits(a, self.tcp):
            self.violations.append((a.tolist(), self.tcp.tolist()))
        if a.shape == (4,) and np.isfinite(a).all():
            self.tcp = np.clip(self.tcp + a[:3] * 0.02, *SIM_BOX)
        if not self.stream_hz:
            with self._moved_lock:
                self.moved = True
            self.wake.set()

    def publish(self, new_state: bool = True) -> None:
        """Publish the joint state; a heartbeat (new_state False) keeps the old stamp."""
        self.k += int(new_state)
        self.pub.publish(rt.joint_state(["x", "y", "z", "finger_left", "finger_right"], [*self.tcp, 0.045, 0.045],
                                        np.zeros(5), t=1000.0 + self.k * 1e-3))

    def _loop(self) -> None:
        last_reset = 0
        while not self.stop.is_set():
            self.wake.wait(1.0 / self.stream_hz if self.stream_hz else 0.05)
            self.wake.clear()
            r = self.reset_sub.latest()
            if r is not None and r.seq > last_reset:
                last_reset = r.seq
                self.done_pub.publish(rt.scalar("std_msgs/msg/Int64", r.msg.data))
                self.publish()
                self.after_reset()
            elif not self.stream_hz:
                with self._moved_lock:
                    moved, self.moved = self.moved, False
                self.publish(new_state=moved)
            elif self.streaming.is_set():
                self.publish()

    def after_reset(self) -> None:
        """What the driver does once a reset's state is out (subclasses: late topics)."""

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.tr.close()


def _env(**kw) -> RobotEnv:
    cfg = dict(success="classifier", max_episode_steps=10**9, transport="dds", reset_timeout_s=10)
    cfg.update(kw)
    return RobotEnv(RobotEnvConfig(**cfg), success_fn=lambda obs: False)


def test_fuzzed_commands_over_dds_stay_inside_limits(dds_env):
    robot = FakeRobot(checker=SafetyFilter(TIGHT))
    env = _env(safety=TIGHT, control_hz=5000.0)
    try:
        env.reset(seed=0)
        n = 10_000
        for action in fuzz_actions(n, seed=1):
            env.step(action)
        assert env.commands_sent == n
        deadline = time.monotonic() + 5
        while len(robot.received) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(robot.received) == n  # reliable: every command arrived, checked on arrival
        assert robot.violations == []
        assert env.safety.counts["workspace"] > 0 and env.safety.counts["nonfinite"] > 0
    finally:
        env.close()
        robot.close()


def test_watchdog_stops_commands_when_observations_stop(dds_env):
    robot = FakeRobot(stream_hz=200.0)
    period, bound = 1 / 50, 0.1
    env = _env(sync=False, control_hz=50.0, obs_timeout_s=0.5, safety=SafetyConfig(watchdog_s=bound))
    errors: list[str] = []
    try:
        robot.streaming.set()
        env.reset(seed=0)

        def drive():
            try:
                while True:
                    env.step(torch.tensor([[0.1, 0.0, 0.0, 0.0]]))
            except EnvError as e:
                errors.append(str(e))

        t = threading.Thread(target=drive)
        t.start()
        time.sleep(0.5)
        robot.streaming.clear()
        t_stop = time.monotonic()
        t.join(5)
        assert not t.is_alive()
        last = max(r for r, _ in robot.received)
        assert len(robot.received) >= 15
        assert last - t_stop <= period + bound + 0.02, last - t_stop  # 20 ms for delivery
        assert env.safety.counts["watchdog"] > 0
        assert len(errors) == 1 and "stale" in errors[0] and "\n" not in errors[0]
    finally:
        env.close()
        robot.close()


def test_estop_stops_commands_within_one_period(dds_env):
    robot = FakeRobot(stream_hz=200.0)
    period = 1 / 50
    env = _env(sync=False, control_hz=50.0)
    errors: list[str] = []
    try:
        robot.streaming.set()
        env.reset(seed=0)

        def drive():
            try:
                while True:
                    env.step(torch.tensor([[0.0, 0.1, 0.0, 0.0]]))
            except EnvError as e:
                errors.append(str(e))

        t = threading.Thread(target=drive)
        t.start()
        time.sleep(0.4)
        robot.estop_pub.publish(rt.scalar("std_msgs/msg/Bool", True))
        t_estop = time.monotonic()
        t.join(5)
        time.sleep(0.2)
        after = [r for r, _ in robot.received if r > t_estop + period + 0.01]
        assert after == [] and len(robot.received) >= 10
        assert errors and "e-stop" in errors[0]
        with pytest.raises(EnvError, match="e-stop"):
            env.step(torch.zeros(1, 4))
    finally:
        env.close()
        robot.close()


def test_killed_robot_node_gives_one_line_error_and_keeps_episodes(dds_env, tmp_path):
    from embodied.data.dataset import read_meta
    from robot_bridge.recorder import RecordingEnv

    proc = subprocess.Popen([sys.executable, "-m", "robot_bridge.sim_node", "Reach", "--transport", "dds",
                             "--image-size", "0", "--rate", "50"], env={**os.environ, "MUJOCO_GL": "egl"}, cwd=ROOT)
    env = RecordingEnv(_env(success="topic", control_hz=100.0, max_episode_steps=50, privileged_topic="/privileged",
                            privileged_dim=15, obs_timeout_s=0.5, reset_timeout_s=90), tmp_path / "rec")
    try:
        obs, _ = env.reset(seed=3)  # answered once the node is up (13 s and more on 2 busy cores)
        finished, steps_in_third = 0, 0
        with pytest.raises(EnvError) as err:
            while True:
                goal_minus_tcp = obs["privileged"][:, 12:15]
                res = env.step(torch.cat([torch.clamp(goal_minus_tcp / 0.02, -1, 1), torch.zeros(1, 1)], 1))
                finished += int(res.done[0])
                obs = res.obs
                if finished == 2:
                    steps_in_third += 1
                    if steps_in_third == 2:
                        proc.send_signal(signal.SIGKILL)
                        proc.wait()
        message = str(err.value)
        assert "\n" not in message and "/joint_states" in message and "robot driver" in message
        meta = read_meta(tmp_path / "rec")
        assert len(meta["episodes"]) == 2 and all(e["success"] for e in meta["episodes"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        env.close()


class NoisyRobot(FakeRobot):
    """A FakeRobot whose /joint_states also carry another publisher's unusable messages: after
    each good state, a bad one with a newer stamp (so it is the newest when the env reads)."""

    def __init__(self, **kw):
        self.only_bad = False
        super().__init__(**kw)

    def _bad(self, i: int):
        names = ["x", "y", "z", "finger_left", "finger_right"]
        t = 1000.0 + (self.k + 0.5) * 1e-3
        if i % 3 == 0 or self.only_bad:
            return rt.joint_state(["shoulder", "elbow"], [0.1, 0.2], t=t)  # another arm's joints
        if i % 3 == 1:
            return rt.joint_state(names, [float("nan"), 0.0, 0.1, 0.045, 0.045], np.zeros(5), t=t)
        return rt.joint_state(names, [0.0, 0.0, 0.1], np.zeros(5), t=t)  # 3 positions for 5 names

    def publish(self, new_state: bool = True) -> None:
        if not self.only_bad:
            super().publish(new_state)
        if new_state:
            self.k += int(self.only_bad)
            self.pub.publish(self._bad(self.k))


def test_unusable_joint_states_are_dropped_not_raised(dds_env):
    """Joint states without the configured joints, with NaN, or with lengths that disagree are
    dropped with a warning; the env keeps stepping on the good ones, and when only bad ones
    come, the timeout error says why they were dropped."""
    robot = NoisyRobot()
    env = _env(control_hz=200.0, obs_timeout_s=0.5)
    try:
        obs, _ = env.reset(seed=0)
        for _ in range(30):
            res = env.step(torch.tensor([[0.2, 0.0, 0.0, 0.0]]))
            assert torch.isfinite(res.obs["state"]).all()
        assert env._js.rejected >= 30
        assert env.safety.counts["no_position"] == 0
        robot.only_bad = True
        with pytest.raises(EnvError, match="ignored, the last because: missing joints") as err:
            env.step(torch.zeros(1, 4))
        assert "\n" not in str(err.value)
    finally:
        env.close()
        robot.close()


class LateTopicsRobot(FakeRobot):
    """After a reset it acknowledges and publishes the joint state at once, the privileged vector,
    the camera frame and the instruction only 0.3 s later; until then their topics hold the episode
    before's (the heartbeat of a driver whose topics come from different nodes)."""

    def __init__(self):
        self.episode = 0
        super().__init__()
        self.priv = self.tr.publisher("/privileged", "std_msgs/msg/Float64MultiArray", SENSOR_QOS)
        self.img = self.tr.publisher("/camera/image_raw", "sensor_msgs/msg/Image", SENSOR_QOS)
        self.instr = self.tr.publisher("/instruction", "std_msgs/msg/String", SENSOR_QOS)
        self.publish_others()

    def publish_others(self) -> None:
        e = self.episode
        self.priv.publish(rt.float64_array(np.full(3, float(e))))
        self.img.publish(rt.image(np.full((8, 8, 3), 10 * e, np.uint8), frame_id="front", t=1000.0 + e))
        self.instr.publish(rt.scalar("std_msgs/msg/String", f"episode {e}"))

    def publish(self, new_state: bool = True) -> None:
        super().publish(new_state)
        if not new_state and hasattr(self, "priv"):  # the other topics beat with the joint state's heartbeat
            self.publish_others()

    def after_reset(self) -> None:
        time.sleep(0.3)
        self.episode += 1


def test_the_first_observation_after_a_reset_has_no_topic_from_the_episode_before(dds_env):
    """RobotEnv.reset reads every topic from messages received after the acknowledgement: a
    privileged vector, camera frame or instruction still from the last episode is not taken."""
    robot = LateTopicsRobot()
    env = _env(privileged_topic="/privileged", privileged_dim=3, image_topics={"front": "/camera/image_raw"},
               image_size=(8, 8), instruction_topic="/instruction", obs_timeout_s=2.0)
    try:
        for episode in (1, 2):
            obs, _ = env.reset(seed=episode)
            assert obs["privileged"].tolist() == [[float(episode)] * 3]
            assert int(obs["rgb_front"][0, 0, 0, 0]) == 10 * episode
            assert obs["instruction"] == [f"episode {episode}"]
    finally:
        env.close()
        robot.close()
