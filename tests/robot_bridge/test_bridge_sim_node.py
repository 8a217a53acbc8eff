"""The sim robot node (`embodied robot-sim`) in its own process, spoken to over DDS on loopback:
malformed commands never kill it, and every frame is one consistent physics snapshot, also at
an episode's end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from robot_bridge import ros_types as rt
from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS, TransportError

from robot_bridge.transport_factory import make_transport
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sim_node(dds_env, tmp_path):
    """start(*extra_args) -> (process, log path): a Reach twin in a second process."""
    procs = []

    def start(*extra: str):
        log = tmp_path / f"sim{len(procs)}.log"
        proc = subprocess.Popen([sys.executable, "-m", "robot_bridge.sim_node", "Reach", "--transport", "dds",
                                 "--image-size", "0", "--rate", "50", *extra],
                                env={**os.environ, "MUJOCO_GL": "egl"}, cwd=ROOT,
                                stdout=log.open("w"), stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc, log

    yield start
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _until(pred, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return False


def test_malformed_commands_never_kill_the_node(sim_node):
    """[1e39, 0, 0, -1] is finite in float64 and inf in float32; with wrong lengths, NaN and
    bytes that are no CDR at all, each is ignored with a warning and the node keeps serving."""
    proc, log = sim_node()
    tr = make_transport("dds", node_name="test_client")
    try:
        js = tr.subscribe("/joint_states", "sensor_msgs/msg/JointState", SENSOR_QOS)
        cmd = tr.publisher("/cmd", "std_msgs/msg/Float64MultiArray", COMMAND_QOS)
        assert _until(lambda: js.latest() is not None and bool(cmd._writer.get_matched_subscriptions()), 20)
        start = js.latest()
        bad = [[1e39, 0.0, 0.0, -1.0], [0.0, -1e300, 0.0, 0.0], [0.5, 0.0], [], [0.0] * 7,
               [float("nan"), 0.0, 0.0, 0.0], [0.0, 0.0, float("-inf"), 1.0]]
        for values in bad:
            cmd.publish(rt.float64_array(values))
        with pytest.raises(TransportError, match="write failed"):  # Cyclone checks CDR against the type
            cmd.publish_raw(b"\x00\x01\x00\x00" + bytes(range(7, 40)))
        # ... but not that strings are UTF-8: a label of invalid UTF-8 reaches the node.
        good = rt.serialize(rt.float64_array([0.1] * 4, labels=["ab"]), "std_msgs/msg/Float64MultiArray")
        cmd.publish_raw(good.replace(b"ab\x00", b"\xff\xfe\x00"))
        cmd.publish(rt.float64_array([1.0, 0.0, 0.0, -1.0]))  # a good one: x moves by 2 cm

        def moved() -> bool:
            got = js.latest()
            return got is not None and got.msg.position[0] > start.msg.position[0] + 0.005

        assert _until(moved), log.read_text()[-2000:]
        time.sleep(0.2)
        assert proc.poll() is None, log.read_text()[-2000:]
        text = log.read_text()
        assert text.count("ignored") >= len(bad) + 1, text[-2000:]
        assert "Traceback" not in text, text[-2000:]
    finally:
        tr.close()


def test_joint_states_match_the_frame_at_episode_end(sim_node):
    """The state in /joint_states is the physics state of the frame it ends: at an episode's
    end the finished episode's final state (the TCP in the privileged observation), not the
    state already reset for the next episode."""
    sim_node()
    env = RobotEnv(RobotEnvConfig(task="Reach", privileged_topic="/privileged", privileged_dim=15, control_hz=100.0,
                                  max_episode_steps=50, transport="dds", obs_timeout_s=5.0, reset_timeout_s=20.0))
    try:
        obs, _ = env.reset(seed=3)
        ends, steps = 0, 0
        while ends < 2:
            action = torch.cat([torch.clamp(obs["privileged"][:, 12:15] / 0.02, -1, 1), -torch.ones(1, 1)], 1)
            res = env.step(action)
            steps += 1
            frame = res.final_obs if bool(res.done[0]) else res.obs
            tcp_js, tcp_priv = frame["state"][0, :3].numpy(), frame["privileged"][0, :3].numpy()
            assert np.abs(tcp_js - tcp_priv).max() < 1e-5, (steps, bool(res.done[0]), tcp_js, tcp_priv)
            if bool(res.done[0]):
                ends += 1
                assert bool(res.info["success"][0])
                new = res.obs
                assert np.abs(new["state"][0, :3].numpy() - new["privileged"][0, :3].numpy()).max() < 1e-5
            obs = res.obs
    finally:
        env.close()


def test_ros2_conventions_of_the_twin(sim_node):
    """A subscriber with default (reliable) QoS receives /joint_states; /camera/camera_info
    carries the MuJoCo camera's intrinsics with the image's stamp; std_srvs/Trigger on /reset
    resets (also as RobotEnv's reset="service"); in lock step, each command of a burst is one
    control step."""
    sim_node("--image-size", "16")
    tr = make_transport("dds", node_name="test_client")
    try:
        js = tr.subscribe("/joint_states", "sensor_msgs/msg/JointState", COMMAND_QOS)  # reliable, like rclpy's default
        priv = tr.subscribe("/privileged", "std_msgs/msg/Float64MultiArray", COMMAND_QOS)
        img = tr.subscribe("/camera/image_raw", "sensor_msgs/msg/Image", SENSOR_QOS)
        info = tr.subscribe("/camera/camera_info", "sensor_msgs/msg/CameraInfo", SENSOR_QOS)
        cmd = tr.publisher("/cmd", "std_msgs/msg/Float64MultiArray", COMMAND_QOS)
        assert _until(lambda: None not in (js.latest(), img.latest(), info.latest()), 20)
        assert _until(lambda: bool(cmd._writer.get_matched_subscriptions()))
        ci = info.latest().msg
        f = 8.0 / np.tan(np.deg2rad(45.0) / 2)  # the front camera: fovy 45 degrees, 16 x 16 pixels
        assert (ci.width, ci.height, ci.header.frame_id) == (16, 16, "front")
        np.testing.assert_allclose(ci.k, [f, 0, 7.5, 0, f, 7.5, 0, 0, 1])
        assert ci.header.stamp == img.latest().msg.header.stamp

        start = js.latest()
        sign = -1.0 if start.msg.position[0] > 0 else 1.0
        for _ in range(5):  # a burst, faster than the node steps
            cmd.publish(rt.float64_array([sign, 0.0, 0.0, -1.0]))
        assert _until(lambda: abs(js.latest().msg.position[0] - start.msg.position[0]) > 0.08), \
            (start.msg.position[0], js.latest().msg.position[0])  # 5 steps of 2 cm, not one

        goal = priv.latest().msg.data[9:12].copy()
        req = rt.msg_class("std_srvs/srv/Trigger_Request")(structure_needs_at_least_one_member=0)
        resp = tr.call_service("/reset", "std_srvs/srv/Trigger", req, timeout=10)
        assert resp.success, resp.message
        assert _until(lambda: not np.allclose(priv.latest().msg.data[9:12], goal))  # a new episode, a new goal

        env = RobotEnv(RobotEnvConfig(task="Reach", reset="service", success="classifier", transport="dds",
                                      obs_timeout_s=5.0), transport=tr, success_fn=lambda obs: False)
        obs, _ = env.reset()  # RobotEnv's reset by service works against the twin
        res = env.step(torch.tensor([[0.0, 0.0, 0.5, -1.0]]))
        assert res.obs["state"][0, 2] > obs["state"][0, 2] + 0.005
    finally:
        tr.close()
