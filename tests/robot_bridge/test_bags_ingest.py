"""rosbag2 recordings (sqlite3 and MCAP, written with rosbags' Writer) into LeRobot v3 datasets:
the layout of a real arm's recording, as-of alignment on header stamps, the camera transform."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from embodied.data.dataset import read_episodes, read_meta
from robot_bridge import ros_types as rt
from robot_bridge.bag_ingest import BagTopics, ingest_rosbag
from robot_bridge.camera import CameraTransform, compressed
from sims.vecenv import EnvError

JOINTS = ["fr3_joint1", "fr3_joint2", "fr3_finger_joint1", "fr3_finger_joint2"]
T0 = 1_764_000_000.0  # header stamps: wall-clock seconds, as a robot's driver stamps them
CMD_HZ, SENSOR_HZ, CAM_HZ = 10, 100, 15
CMD_LATE = 0.050  # a command is logged 50 ms after its stamp (recorded on another host)
EE_STEP = 0.02


def _pose(x: float, t: float):
    m = rt.msg_class
    pose = m("geometry_msgs/msg/Pose")(position=m("geometry_msgs/msg/Point")(x=x, y=0.1, z=0.3),
                                       orientation=m("geometry_msgs/msg/Quaternion")(x=1.0, y=0.0, z=0.0, w=0.0))
    return m("geometry_msgs/msg/PoseStamped")(header=rt.header("fr3_link0", t), pose=pose)


def _pose_x(t: float) -> float:
    return 0.3 + 0.1 * (t - T0)  # the arm moves at 0.1 m/s along x: its pose tells its time


def write_recording(path, storage: str, episodes: int = 2, seconds: float = 1.0) -> None:
    """What `ros2 bag record` of a CRISP-style arm holds: a raw front camera (64 x 48 rgb8, 15 Hz)
    and a JPEG wrist camera, joint states and the current pose at 100 Hz, pose targets at 10 Hz
    (each stamped 7 ms after a sensor tick and logged 50 ms late), a gripper width, success and
    reset, and a topic nobody asked for. Every sample carries its time: pose x, joint 1 position,
    the image value (frame index)."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    ts = rt.typestore()
    plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
    msgs = []  # (log time s, topic, type, message)
    start = T0
    for e in range(episodes):
        msgs.append((start - 0.5, "/reset", "std_msgs/msg/Int64", rt.scalar("std_msgs/msg/Int64", e)))
        for k in range(int((seconds + 0.1) * SENSOR_HZ)):  # sensors run on past the last command
            t = start + k / SENSOR_HZ
            js = rt.joint_state(JOINTS, [t - T0, 0.0, 0.04, 0.04], np.zeros(4), t=t)  # fingers open: 8 cm
            msgs += [(t + 0.002, "/joint_states", "sensor_msgs/msg/JointState", js),
                     (t + 0.002, "/current_pose", "geometry_msgs/msg/PoseStamped", _pose(_pose_x(t), t))]
        for k in range(int((seconds + 0.1) * CAM_HZ)):
            t = start + k / CAM_HZ
            f = round((t - T0) * CAM_HZ)  # frame index since T0
            front = rt.image(np.full((48, 64, 3), (8 * f) % 250, np.uint8), frame_id="front", t=t)
            wrist = compressed(np.full((48, 64, 3), (8 * f) % 250, np.uint8), "jpeg", t=t)
            msgs += [(t + 0.030, "/camera/camera/color/image_raw", "sensor_msgs/msg/Image", front),
                     (t + 0.030, "/wrist/image_raw/compressed", "sensor_msgs/msg/CompressedImage", wrist)]
        for k in range(int(seconds * CMD_HZ)):
            t = start + 0.107 + k / CMD_HZ
            width = 0.08 if k < 5 else 0.0
            msgs += [(t + CMD_LATE, "/target_pose", "geometry_msgs/msg/PoseStamped",
                      _pose(_pose_x(t - 0.007) + 0.5 * EE_STEP, t)),  # 0.5 action units past the as-of pose
                     (t - 0.001, "/gripper/width", "std_msgs/msg/Float64", rt.scalar("std_msgs/msg/Float64", width)),
                     (t, "/rosout_agg", "std_msgs/msg/String", rt.scalar("std_msgs/msg/String", "log"))]
        msgs.append((start + seconds + 0.06, "/success", "std_msgs/msg/Bool", rt.scalar("std_msgs/msg/Bool", e == 1)))
        start += seconds + 1.0
    msgs.sort(key=lambda m: m[0])
    with Writer(path, version=9, storage_plugin=plugin) as w:
        conns = {}
        for _, topic, typ, _ in msgs:
            if topic not in conns:
                conns[topic] = w.add_connection(topic, typ, typestore=ts)
        for log, topic, typ, msg in msgs:
            w.write(conns[topic], int(log * 1e9), rt.serialize(msg, typ))


TOPICS = dict(command_topic="/target_pose", pose_topic="/current_pose", gripper_topic="/gripper/width", gripper_open=0.08, gripper_closed=0.0,
              ee_step=EE_STEP, joint_names=tuple(JOINTS), control_hz=CMD_HZ, instruction="reach the cube",
              obs_topics={"state": "/joint_states", "rgb_front": "/camera/camera/color/image_raw", "rgb_wrist": "/wrist/image_raw/compressed"})


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_real_recording_aligned_as_of_each_command(tmp_path, storage):
    write_recording(tmp_path / "bag", storage)
    camera = CameraTransform((32, 32), crop="center", interpolation="area")
    summary = ingest_rosbag(tmp_path / "bag", tmp_path / "ds", "Reach", BagTopics(**TOPICS, camera=camera))
    assert summary == {"out": str(tmp_path / "ds"), "storage": storage, "episodes": 2, "steps": 20}
    meta = read_meta(tmp_path / "ds")
    info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == CMD_HZ
    assert info["embodied"]["spec"]["camera_transform"] == camera.to_dict()
    assert [e["success"] for e in meta["episodes"]] == [False, True]
    for e, ep in enumerate(read_episodes(tmp_path / "ds")):
        cmd_t = np.array([T0 + e * 2.0 + 0.107 + k / CMD_HZ for k in range(10)]) - T0  # since T0
        state_t = ep["obs.state"][:, 0].double().numpy()
        # as-of: the newest sample at or before the command's stamp, never one from after it
        # (the 100 Hz samples logged between a command's stamp and its late log are after it)
        assert (state_t <= cmd_t + 1e-6).all() and (state_t > cmd_t - 1.0 / SENSOR_HZ).all(), state_t - cmd_t
        frame = np.floor(cmd_t * CAM_HZ)
        for cam in ("front", "wrist"):
            img = ep[f"obs.rgb_{cam}"]
            assert img.shape == (10, 32, 32, 3) and img.dtype == torch.uint8  # through the camera transform
            assert np.allclose(img[:, 16, 16, 0].double().numpy(), (8 * frame) % 250, atol=4), cam
        # the pose target 0.5 action units past the as-of pose (0.3 from the pose 30 ms later, which
        # a log-order alignment would take); the gripper's width as -1 open, +1 closed
        assert np.allclose(ep["action"][:, 0].numpy(), 0.5, atol=1e-3)
        assert ep["action"][:, 3].tolist() == [-1.0] * 5 + [1.0] * 5
        assert ep["instruction"] == "reach the cube" and ep["success"].tolist() == [False] * 9 + [e == 1]


def test_missing_topic_and_bad_bag_are_one_line(tmp_path):
    write_recording(tmp_path / "bag", "mcap", episodes=1, seconds=0.3)
    with pytest.raises(EnvError, match=r"bag topics: \['/nope'\] not in bag; it has \[") as e:
        ingest_rosbag(tmp_path / "bag", tmp_path / "ds", "Reach", BagTopics(**{**TOPICS, "obs_topics": {"state": "/nope"}}))
    assert "\n" not in str(e.value)
    with pytest.raises(EnvError, match="is not a readable rosbag2 directory"):
        ingest_rosbag(tmp_path / "nothing", tmp_path / "ds", "Reach", BagTopics())
    with pytest.raises(EnvError, match="needs a pose_topic"):
        ingest_rosbag(tmp_path / "bag", tmp_path / "ds2", "Reach", BagTopics(**{**TOPICS, "pose_topic": None}))
    with pytest.raises(EnvError, match="'ee_pose' is not a dataset feature"):
        BagTopics(obs_topics={"ee_pose": "/current_pose"})


def test_serve_and_sim2real_apply_the_recorded_camera_transform(tmp_path):
    """A policy SFT'd on an ingested recording sees the robot's frames through the transform its
    dataset recorded, in `embodied serve` and in `sim2real --robot`."""
    import yaml

    from embodied.config import load_config
    from embodied.deploy.serve import robot_config_for
    from embodied.eval.sim2real_robot import Sim2RealError, robot_config_from_file

    write_recording(tmp_path / "bag", "sqlite3", episodes=1, seconds=0.3)
    camera = CameraTransform((64, 64), crop="none", interpolation="area", roi=(4, 2, 56, 40))
    ingest_rosbag(tmp_path / "bag", tmp_path / "ds", "Reach", BagTopics(**TOPICS, camera=camera))
    cfg = load_config(None, ["env.task=Reach", "env.obs_mode=rgb", "env.cameras=[front,wrist]", "policy.name=flow_vla"])
    record = {"task": "Reach", "obs_keys": ["state", "rgb_front", "rgb_wrist"], "dataset": str(tmp_path / "ds")}
    rc = robot_config_for(cfg, record=record)  # what `embodied serve` builds
    assert rc.camera_transform == camera and rc.privileged_topic is None
    assert rc.image_topics == {"front": "/camera/image_raw", "wrist": "/camera/wrist/image_raw"}
    assert robot_config_for(cfg, record={}).camera_transform == CameraTransform((64, 64))  # none recorded: the default
    # `embodied sft` copies the transform into the record: served where the dataset is not
    moved = {**record, "dataset": str(tmp_path / "elsewhere"), "camera_transform": camera.to_dict()}
    assert robot_config_for(cfg, record=moved).camera_transform == camera
    robot = {"task": "Reach", "image_topics": rc.image_topics, "image_size": [64, 64]}
    (tmp_path / "robot.yaml").write_text(yaml.safe_dump(robot))
    assert robot_config_from_file(tmp_path / "robot.yaml", cfg, "vla", record).camera_transform == camera
    (tmp_path / "robot.yaml").write_text(yaml.safe_dump({**robot, "camera": {"crop": "none", "interpolation": "area",
                                                                             "roi": [4, 2, 56, 40]}}))
    assert robot_config_from_file(tmp_path / "robot.yaml", cfg, "vla", record).camera_transform == camera
    (tmp_path / "robot.yaml").write_text(yaml.safe_dump({**robot, "camera": {"crop": "center"}}))
    with pytest.raises(Sim2RealError, match=r"robot.camera: .* differs from the transform checkpoint vla's"):
        robot_config_from_file(tmp_path / "robot.yaml", cfg, "vla", record)


def test_for_robot_gives_the_state_robot_env_builds(tmp_path):
    """BagTopics.for_robot(the arm's RobotEnvConfig): the CRISP-style FR3 of configs/robots/ in its
    ee_pose layout, the state RobotEnv builds from the as-of pose (TCP, velocity, finger gap)."""
    from pathlib import Path

    import yaml

    from robot_bridge.robot_env_config import robot_config_from_mapping

    write_recording(tmp_path / "bag", "mcap", episodes=1, seconds=0.5)
    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "robots" / "fr3_crisp.yaml").read_text())
    robot = robot_config_from_mapping(data, ee_origin=[0.3, 0.1, 0.3], gripper_topic="/gripper/width",
                                      gripper_type="std_msgs/msg/Float64", control_hz=CMD_HZ, reset="topic",
                                      image_topics={"front": "/camera/camera/color/image_raw"}, image_size=[32, 32])
    topics = BagTopics.for_robot(robot, instruction="reach the cube")
    assert topics.command_topic == "/target_pose" and topics.pose_topic == "/current_pose"
    assert ingest_rosbag(tmp_path / "bag", tmp_path / "ds", "Reach", topics)["steps"] == 5
    ep = next(read_episodes(tmp_path / "ds"))
    cmd_t = np.array([0.107 + k / CMD_HZ for k in range(5)])
    state = ep["obs.state"].double().numpy()
    assert state.shape == (5, 9) and ep["obs.rgb_front"].shape == (5, 32, 32, 3)
    assert np.allclose(state[:, 0], 0.1 * (cmd_t - 0.007), atol=1e-5)  # TCP x of the as-of pose, minus ee_origin
    assert np.allclose(state[:, 1:3], 0.0, atol=1e-5) and np.allclose(state[:, 3], 0.1, atol=1e-3)  # 0.1 m/s
    assert np.allclose(state[:, 6], 2 * 0.045) and np.allclose(state[:, 7], 0.0)  # fingers open: the MuJoCo gap
    assert state[:, 8].tolist() == [0.0, -1.0, -1.0, -1.0, -1.0]  # the last gripper command sent
    assert np.allclose(ep["action"][:, 0].numpy(), 0.5, atol=1e-3)
