"""Recording: robot episodes and rosbag2 files into the episode dataset format."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodied.data.dataset import read_episodes, read_meta
from robot_bridge import ros_types as rt
from robot_bridge.recorder import BagTopics, RecordingEnv, ingest_rosbag
from sims.registry import expert_for, make_env
from sims.vecenv import EnvError

JOINTS = ["x", "y", "z", "finger_left", "finger_right"]


def test_recording_env_writes_the_collect_format(tmp_path):
    env = RecordingEnv(make_env("Reach", 1, num_threads=1, seed=0), tmp_path / "ds")
    expert = expert_for("Reach")
    obs, _ = env.reset(seed=7)
    while env.episodes_written < 2:
        res = env.step(torch.as_tensor(expert(obs["privileged"].numpy())))
        obs = res.obs
    meta = read_meta(tmp_path / "ds")
    assert meta["embodied"]["task"] == "Reach" and len(meta["episodes"]) == 2 and meta["episodes"][0]["seed"] == 7
    ep = next(read_episodes(tmp_path / "ds"))
    L = meta["episodes"][0]["length"]
    assert ep["obs.state"].shape == (L, 9) and ep["obs.privileged"].shape == (L, 15)
    assert ep["action"].shape == (L, 4) and ep["reward"].shape == (L,) and ep["success"].shape == (L,)
    assert bool(ep["success"][-1]) and ep["instruction"]
    with pytest.raises(EnvError, match="num_envs"):
        RecordingEnv(make_env("Reach", 2, num_threads=1), tmp_path / "other")


def _write_bag(path, episodes: int = 2, steps: int = 5) -> None:
    """A rosbag2 recording of a robot: joint states at 100 Hz, images at 20 Hz, commands at
    20 Hz (offset by 3 ms), a success flag at the end and a reset between episodes."""
    from rosbags.rosbag2 import Writer

    ts = rt.typestore()
    with Writer(path, version=9) as w:
        c_js = w.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=ts)
        c_img = w.add_connection("/camera/image_raw", "sensor_msgs/msg/Image", typestore=ts)
        c_cmd = w.add_connection("/cmd", "std_msgs/msg/Float64MultiArray", typestore=ts)
        c_succ = w.add_connection("/success", "std_msgs/msg/Bool", typestore=ts)
        c_reset = w.add_connection("/reset", "std_msgs/msg/Int64", typestore=ts)
        t = 1_000_000_000
        for e in range(episodes):
            w.write(c_reset, t, rt.serialize(rt.scalar("std_msgs/msg/Int64", e), "std_msgs/msg/Int64"))
            for k in range(steps * 5):  # 10 ms per tick
                t += 10_000_000
                x = e + k * 0.001  # x encodes episode and tick
                w.write(c_js, t, rt.serialize(rt.joint_state(JOINTS, [x, 0, 0.1, 0.02, 0.02], np.zeros(5)),
                                              "sensor_msgs/msg/JointState"))
                if k % 5 == 0:
                    img = np.full((16, 16, 3), 10 * k, np.uint8)
                    w.write(c_img, t, rt.serialize(rt.image(img), "sensor_msgs/msg/Image"))
                    a = [k * 0.01, 0.0, 0.0, 1.0]
                    w.write(c_cmd, t + 3_000_000, rt.serialize(rt.float64_array(a), "std_msgs/msg/Float64MultiArray"))
            w.write(c_succ, t + 5_000_000, rt.serialize(rt.scalar("std_msgs/msg/Bool", e == 1), "std_msgs/msg/Bool"))
            t += 100_000_000


def test_rosbag_ingestion_aligns_topics_by_time(tmp_path):
    _write_bag(tmp_path / "bag")
    topics = BagTopics(obs_topics={"state": "/joint_states", "rgb_front": "/camera/image_raw"}, instruction="reach")
    summary = ingest_rosbag(tmp_path / "bag", tmp_path / "ds", "Reach", topics)
    assert summary["episodes"] == 2 and summary["steps"] == 10
    meta = read_meta(tmp_path / "ds")
    assert [e["success"] for e in meta["episodes"]] == [False, True]
    eps = list(read_episodes(tmp_path / "ds"))
    ep = eps[1]
    assert ep["obs.state"].shape == (5, 9) and ep["obs.rgb_front"].shape == (5, 16, 16, 3)
    assert ep["obs.rgb_front"].dtype == torch.uint8 and ep["instruction"] == "reach"
    # the command of tick k (3 ms after it) sees the joint state and image of tick k
    ticks = np.arange(0, 25, 5)
    assert np.allclose(ep["obs.state"][:, 0].numpy(), 1 + ticks * 0.001, atol=1e-6)
    # images are stored as H.264 video: compare with a small tolerance
    assert np.allclose(ep["obs.rgb_front"][:, 0, 0, 0].numpy(), 10 * ticks, atol=3)
    assert np.allclose(ep["action"][:, 0].numpy(), ticks * 0.01)
    assert np.allclose(ep["obs.state"][:, 6].numpy(), 0.04)  # finger gap
    assert ep["success"].tolist() == [False] * 4 + [True]


def test_rosbag_missing_topic_is_one_line(tmp_path):
    _write_bag(tmp_path / "bag", episodes=1)
    with pytest.raises(EnvError, match=r"bag topics: \['/nope'\] not in"):
        ingest_rosbag(tmp_path / "bag", tmp_path / "ds", "Reach", BagTopics(obs_topics={"state": "/nope"}))
