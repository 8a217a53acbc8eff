"""The twin speaks the arm interfaces (`embodied robot-sim --interface cmd|pose|twist|trajectory`)
and publishes every camera of its task. Over DDS in one process: the Reach twin driven through
configs/robots/twin_*.yaml by the scripted expert and then one action chunk moves exactly as it
does on /cmd (a sim-trained policy served to a twin that looks like an arm driver)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
from robot_bridge.robot_env_config import robot_config_from_mapping
from robot_bridge.sim_node import SimNodeConfig, SimRobotNode, camera_topic
from sims.registry import expert_for

ROOT = Path(__file__).resolve().parents[2]
HZ = 20.0  # the twin's control rate (Reach): a twist is held for 1 / HZ
CHUNK = torch.tensor([[[0.5, -0.3, 0.2, 1.0]] * 4])  # [1, K, A]: one chunk of 4 commands


def _twin(cfg: SimNodeConfig) -> tuple[SimRobotNode, threading.Thread]:
    """The twin made, spun and closed in its own thread (its renderer's GL context belongs to that
    thread); set node.stop and join the thread to end it."""
    made: list = []
    ready = threading.Event()

    def run() -> None:
        try:
            made.append(SimRobotNode(cfg))
        finally:
            ready.set()
        try:
            made[0].spin()
        finally:
            made[0].close()

    spin = threading.Thread(target=run, daemon=True)
    spin.start()
    ready.wait(120)
    assert made, "the twin did not start"
    return made[0], spin


def _drive(interface: str, config: RobotEnvConfig, image_size: int = 0) -> tuple[list, dict]:
    """States [x, y, z, gap, grip] after each of 8 expert steps and after one chunk; the first obs."""
    node, spin = _twin(SimNodeConfig(task="Reach", image_size=image_size, transport="dds", rate_hz=HZ, interface=interface))
    env = RobotEnv(config)
    try:
        obs, _ = env.reset(seed=3)
        first, expert, states = obs, expert_for("Reach"), []
        for _ in range(8):
            obs = env.step(torch.as_tensor(expert(obs["privileged"].double().numpy()))).obs
            states.append(obs["state"][0, [0, 1, 2, 6, 8]].tolist())
        env.chunk_step(CHUNK)
        time.sleep(0.3)  # the chunk has run (a stepped twin steps each point as it comes)
        states.append(env.st.vector(env._js.latest().msg)[[0, 1, 2, 6, 8]].tolist())
        return states, first
    finally:
        env.close()
        node.stop.set()
        spin.join(10)


def test_twin_speaks_every_interface_and_publishes_every_camera(dds_env):
    base = RobotEnvConfig(task="Reach", privileged_topic="/privileged", privileged_dim=15, control_hz=HZ,
                          max_episode_steps=50, image_size=(16, 16), transport="dds",
                          image_topics={cam: camera_topic(cam) for cam in ("front", "wrist")})
    want, first = _drive("cmd", base, image_size=16)
    # every camera of the task, on its topic (front on /camera/image_raw): two different views
    assert camera_topic("front") == "/camera/image_raw" and camera_topic("wrist") == "/camera/wrist/image_raw"
    assert first["rgb_front"].shape == first["rgb_wrist"].shape == (1, 16, 16, 3)
    assert not torch.equal(first["rgb_front"], first["rgb_wrist"])
    moved = np.abs(np.array(want[-1][:3]) - np.array(want[0][:3])).max()
    assert moved > 0.02, want
    for interface, name in (("pose", "twin_pose"), ("twist", "twin_twist"), ("trajectory", "twin_trajectory")):
        data = yaml.safe_load((ROOT / "configs" / "robots" / f"{name}.yaml").read_text())
        cfg = robot_config_from_mapping(data, control_hz=HZ, transport="dds")
        got, _ = _drive(interface, cfg)
        np.testing.assert_allclose(got[:-1], want[:-1], atol=1e-5, err_msg=interface)  # step by step: exact
        # the chunk: as steps, exact; as one trajectory its points are absolute targets planned from where
        # the chunk began, so the TCP ends where the plan put it rather than K deltas from where it got
        np.testing.assert_allclose(got[-1], want[-1], atol=1e-5 if interface != "trajectory" else 5e-3, err_msg=interface)


def test_twin_interface_rejects_bad_commands_and_keeps_running(dds_env):
    """A trajectory without the x, y, z joints and a non-finite pose are ignored with a warning."""
    from robot_bridge import ros_types as rt
    from robot_bridge.arm_commands import pose_stamped
    from robot_bridge.transport import COMMAND_QOS
    from robot_bridge.transport_factory import make_transport

    for interface in ("trajectory", "pose"):
        node, spin = _twin(SimNodeConfig(task="Reach", image_size=0, transport="dds", rate_hz=HZ, interface=interface))
        tr = make_transport("dds", None, "bad_commands")
        try:
            if interface == "trajectory":
                pub = tr.publisher("/joint_trajectory_controller/joint_trajectory", "trajectory_msgs/msg/JointTrajectory",
                                   COMMAND_QOS)
                msg = rt.joint_trajectory(["a", "b", "c"], np.zeros((2, 3)), 0.04)
            else:
                pub = tr.publisher("/target_pose", "geometry_msgs/msg/PoseStamped", COMMAND_QOS)
                msg = pose_stamped(np.array([np.nan, 0.0, 0.0]), np.array([1.0, 0, 0, 0]), "world")
            end = time.monotonic() + 10
            while node.rejected == 0 and time.monotonic() < end:
                pub.publish(msg)
                time.sleep(0.05)
            assert node.rejected > 0 and node.steps == 0 and spin.is_alive()
        finally:
            tr.close()
            node.stop.set()
            spin.join(10)


@pytest.mark.parametrize("bad,why", [
    (dict(interface="pose_target"), "interface: pose_target needs state_layout ee_pose"),
    (dict(interface="twist", state_layout="ee_pose", ee_pose_topic="/p"), "gripper_topic: interface twist"),
    (dict(interface="servo"), "interface: unknown 'servo'"),
    (dict(state_layout="ee_pose"), "ee_pose_topic: the ee_pose layout needs"),
    (dict(interface="forward_commands", state_layout="joints", joint_names=("a", "b")),
     "safety.mode: the joints layout with interface forward_commands takes joint targets"),
    (dict(gripper_open=0.0), "gripper_open, gripper_closed: must differ"),
])
def test_interface_config_errors_name_the_field(bad, why):
    from sims.vecenv import EnvError

    with pytest.raises(EnvError) as e:
        RobotEnvConfig(**bad)
    assert str(e.value).startswith(why) and "\n" not in str(e.value), str(e.value)
