"""Real camera frames into RobotEnv: a camera robot in a second process publishes 640 x 480
JPEG and PNG CompressedImages and raw bgr8 / mono8 frames at odd sizes over DDS; the
observation has the configured shape and, within one grey level, the centre crop and
resampling of the decoded source frame computed in float64 by the test (not by OpenCV); the recorder writes the transform into the dataset's metadata."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from robot_bridge import camera as cam
from robot_bridge import ros_types as rt
from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
from sims.vecenv import EnvError

ROOT = Path(__file__).resolve().parents[2]
JOINTS = ["x", "y", "z", "finger_left", "finger_right"]
# camera name -> (topic, encoding, height, width, row padding)
CAMERAS = {"jpeg": ("/cam_jpeg/image_raw/compressed", "jpeg", 480, 640, 0),
           "png": ("/cam_png/image_raw/compressed", "png", 217, 301, 0),
           "bgr8": ("/cam_bgr8/image_raw", "bgr8", 333, 517, 5),
           "mono8": ("/cam_mono8/image_raw", "mono8", 241, 199, 3)}


def source_frame(name: str, h: int, w: int) -> np.ndarray:
    """A deterministic uint8 RGB [h, w, 3] scene: gradients, blocks, noise (so that resampling
    and cropping errors show)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 255 // (h + w)], -1)
    for _ in range(12):
        y0, x0 = rng.integers(0, h - 8), rng.integers(0, w - 8)
        img[y0:y0 + rng.integers(4, h // 3), x0:x0 + rng.integers(4, w // 3)] = rng.integers(0, 256, 3)
    return np.clip(img + rng.integers(-20, 21, img.shape), 0, 255).astype(np.uint8)


def frame_message(name: str, t: float):
    _, enc, h, w, pad = CAMERAS[name]
    rgb = source_frame(name, h, w)
    if enc in cam.COMPRESSED_FORMATS:
        return cam.compressed(rgb, enc, quality=90, frame_id=name, t=t)
    px = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR) if enc == "bgr8" else cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    return cam.raw(px, enc, frame_id=name, t=t, pad=pad)


def camera_robot(seconds: float) -> None:
    """The second process: a robot with four cameras, streaming at 30 Hz, echoing resets; every
    fourth frame is followed by a broken PNG on the png camera."""
    from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS
    from robot_bridge.transport_factory import make_transport

    tr = make_transport("dds", node_name="camera_robot")
    js = tr.publisher("/joint_states", "sensor_msgs/msg/JointState", SENSOR_QOS)
    done = tr.publisher("/reset_done", "std_msgs/msg/Int64", COMMAND_QOS)
    reset = tr.subscribe("/reset", "std_msgs/msg/Int64", COMMAND_QOS)
    tr.subscribe("/cmd", "std_msgs/msg/Float64MultiArray", COMMAND_QOS)
    pubs = {n: tr.publisher(top, "sensor_msgs/msg/CompressedImage" if enc in cam.COMPRESSED_FORMATS
                            else "sensor_msgs/msg/Image", SENSOR_QOS) for n, (top, enc, *_) in CAMERAS.items()}
    msgs = {n: frame_message(n, 0.0) for n in CAMERAS}
    garbage = rt.msg_class("sensor_msgs/msg/CompressedImage")(header=rt.header("png"), format="png",
                                                              data=np.frombuffer(b"\x89PNG not really", np.uint8))
    print("camera robot up", flush=True)
    end, seen, k = time.monotonic() + seconds, 0, 0
    while time.monotonic() < end:
        t = time.time()
        r = reset.latest()
        if r is not None and r.seq > seen:
            seen = r.seq
            done.publish(rt.scalar("std_msgs/msg/Int64", r.msg.data))
        for n, m in msgs.items():
            m.header.stamp = rt.stamp(t)
            pubs[n].publish(m)
        k += 1
        if k % 4 == 0:  # a broken PNG now and then: RobotEnv drops it, never raises
            pubs["png"].publish(garbage)
        js.publish(rt.joint_state(JOINTS, [0.0, 0.0, 0.1, 0.02, 0.02], np.zeros(5), t=t))
        time.sleep(1 / 30)
    tr.close()


def _area(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] weights of shrinking by box averaging: output pixel i is the mean of the
    input span [i s, (i + 1) s), s = n_in / n_out, partial pixels weighted by their overlap."""
    s = n_in / n_out
    lo, hi = np.arange(n_out)[:, None] * s, np.arange(1, n_out + 1)[:, None] * s
    j = np.arange(n_in)[None]
    return np.clip(np.minimum(hi, j + 1) - np.maximum(lo, j), 0, None) / s


def _linear(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] weights of bilinear enlarging with pixel centres aligned (source
    coordinate (i + 0.5) n_in / n_out - 0.5, clamped to the edge pixels)."""
    src = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
    j0 = np.floor(src).astype(int)
    j1, f = np.minimum(j0 + 1, n_in - 1), src - j0
    w = np.zeros((n_out, n_in))
    np.add.at(w, (np.arange(n_out), j0), 1 - f)
    np.add.at(w, (np.arange(n_out), j1), f)
    return w


def expected(name: str, size: tuple[int, int]) -> np.ndarray:
    """The policy's frame computed another way than the code under test: the decoded source
    frame, centre-cropped to the aspect of size, resampled in float64 by separable weight
    matrices (box averaging when shrinking, bilinear when enlarging), rounded. float64 [H, W, 3];
    compare with a tolerance of one grey level (OpenCV works in fixed point)."""
    _, enc, h, w, _ = CAMERAS[name]
    rgb = source_frame(name, h, w)
    if enc in cam.COMPRESSED_FORMATS:  # decoding is not under test: the frame as the robot's decoder sees it
        ok, buf = cv2.imencode(".jpg" if enc == "jpeg" else ".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                               [cv2.IMWRITE_JPEG_QUALITY, 90] if enc == "jpeg" else [])
        rgb = cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    elif enc == "mono8":  # the grey frame the robot sends, as three equal channels
        rgb = np.repeat(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)[..., None], 3, -1)
    H, W = size
    if w * H > h * W:
        cw = round(h * W / H)
        rgb = rgb[:, (w - cw) // 2:(w - cw) // 2 + cw]
    elif w * H < h * W:
        ch = round(w * H / W)
        rgb = rgb[(h - ch) // 2:(h - ch) // 2 + ch]
    ch, cw = rgb.shape[:2]
    wy = _area(ch, H) if H <= ch else _linear(ch, H)
    wx = _area(cw, W) if W <= cw else _linear(cw, W)
    return np.round(np.einsum("yi,ijc,xj->yxc", wy, rgb.astype(np.float64), wx, optimize=True))


def assert_frame(got: torch.Tensor, name: str, size: tuple[int, int]) -> None:
    """got: uint8 [H, W, 3] within one grey level of the float reference everywhere."""
    diff = np.abs(got.numpy().astype(np.float64) - expected(name, size))
    assert diff.max() <= 1, f"{name} at {size}: max |diff| {diff.max()}, {np.mean(diff > 0):.3f} of values off"


@pytest.fixture(scope="module")
def robot(dds_env):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, __file__, "--seconds", "120"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "camera robot up"
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _env(image_type: str, names: list[str], size: tuple[int, int], **kw) -> RobotEnv:
    cfg = RobotEnvConfig(task="camera", image_topics={n: CAMERAS[n][0] for n in names}, image_type=image_type,
                         image_size=size, success="classifier", transport="dds", max_episode_steps=3,
                         obs_timeout_s=5.0, **kw)
    return RobotEnv(cfg, success_fn=lambda obs: False)


@pytest.mark.parametrize("size", [(64, 64), (96, 128)])
def test_compressed_640x480_jpeg_and_png_reach_the_policy_as_opencv_transforms_them(robot, size):
    env = _env("sensor_msgs/msg/CompressedImage", ["jpeg", "png"], size)
    try:
        obs, _ = env.reset(seed=0)
        obs = env.step(torch.zeros(1, 4)).obs
        for name in ("jpeg", "png"):
            got = obs[f"rgb_{name}"]
            assert got.dtype == torch.uint8 and tuple(got.shape) == (1, *size, 3)
            assert_frame(got[0], name, size)
        assert env._images["jpeg"].rejected == 0 and env._images["jpeg"].count > 0
        end = time.monotonic() + 3.0
        while env._images["png"].rejected == 0 and time.monotonic() < end:
            env.step(torch.zeros(1, 4))
        assert env._images["png"].rejected > 0 and "not a valid png" in env._images["png"].last_rejection
        assert_frame(env.step(torch.zeros(1, 4)).obs["rgb_png"][0], "png", size)
    finally:
        env.close()


def test_raw_bgr8_and_mono8_at_odd_sizes_with_row_padding(robot):
    size = (64, 64)
    env = _env("sensor_msgs/msg/Image", ["bgr8", "mono8"], size)
    try:
        obs, _ = env.reset(seed=0)
        for name in ("bgr8", "mono8"):
            assert tuple(obs[f"rgb_{name}"].shape) == (1, 64, 64, 3)
            assert_frame(obs[f"rgb_{name}"][0], name, size)
        # the mono frame's 199 x 199 centre crop shrinks to 64 x 64: INTER_AREA
        assert env.camera.flag(199, 199) == cv2.INTER_AREA
    finally:
        env.close()
    env = _env("sensor_msgs/msg/Image", ["mono8"], (256, 256))
    try:
        obs, _ = env.reset(seed=0)
        # and enlarges to 256 x 256: INTER_LINEAR
        assert env.camera.flag(199, 199) == cv2.INTER_LINEAR
        assert_frame(obs["rgb_mono8"][0], "mono8", (256, 256))
    finally:
        env.close()


def test_recorder_writes_the_transform_into_the_dataset(robot, tmp_path):
    from embodied.data.dataset import DatasetError, read_episodes
    from robot_bridge.recorder import RecordingEnv

    rec = RecordingEnv(_env("sensor_msgs/msg/CompressedImage", ["jpeg"], (64, 64)), tmp_path / "ds")
    try:
        rec.reset(seed=1)
        while rec.episodes_written < 1:
            rec.step(torch.zeros(1, 4))
    finally:
        rec.close()
    info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
    want = {"size": [64, 64], "crop": "center", "interpolation": "auto", "roi": None, "library": "opencv"}
    assert info["embodied"]["spec"]["camera_transform"] == want
    ep = next(read_episodes(tmp_path / "ds"))
    assert ep["obs.rgb_jpeg"].shape[1:] == (64, 64, 3)
    other = _env("sensor_msgs/msg/CompressedImage", ["jpeg"], (64, 64), camera={"crop": "none"})
    try:  # another transform into the same dataset would mix pixels: refused, naming both
        with pytest.raises(DatasetError, match="camera transform"):
            RecordingEnv(other, tmp_path / "ds")
    finally:
        other.close()


def test_a_real_rclpy_camera_node_640x480_jpeg(dds_env, tmp_path):
    """A real ROS 2 node (Jazzy rclpy, Fast DDS, its own process) publishes a 640 x 480 JPEG
    CompressedImage; RobotEnv (DDS transport) gets exactly OpenCV's transform of it."""
    py = ROOT / ".venv-ros-jazzy" / "bin" / "python"
    if not py.exists():
        pytest.skip(".venv-ros-jazzy missing: build it with `make ros2` (ROS 2 Jazzy wheels)")
    from robot_bridge.transport import fastdds_loopback_env  # with the ROS 2 venvs (make ros2)

    jpeg = tmp_path / "frame.jpg"
    _, _, h, w, _ = CAMERAS["jpeg"]
    jpeg.write_bytes(cam.compressed(source_frame("jpeg", h, w), "jpeg", quality=90).data.tobytes())
    env = {**os.environ, **fastdds_loopback_env(tmp_path), "ROS_DISTRO": "jazzy", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("FASTDDS_DEFAULT_PROFILES_FILE")  # Jazzy's Fast DDS 2 reads FASTRTPS_DEFAULT_PROFILES_FILE
    node = Path(__file__).resolve().parent / "ros2_camera.py"
    proc = subprocess.Popen([str(py), str(node), "--jpeg", str(jpeg), "--seconds", "60"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "camera up"
        robot = RobotEnv(RobotEnvConfig(task="camera", image_topics={"front": "/camera/image_raw/compressed"},
                                        image_type="sensor_msgs/msg/CompressedImage", success="classifier",
                                        transport="dds", obs_timeout_s=10.0), success_fn=lambda obs: False)
        try:
            obs, _ = robot.reset(seed=0)
            obs = robot.step(torch.zeros(1, 4)).obs
            assert tuple(obs["rgb_front"].shape) == (1, 64, 64, 3)
            assert_frame(obs["rgb_front"][0], "jpeg", (64, 64))
        finally:
            robot.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_transform_geometry_and_config_errors():
    t = cam.CameraTransform((64, 64))
    assert t.window(480, 640) == (80, 0, 480, 480)  # centre crop to square, then INTER_AREA
    assert t.flag(480, 480) == cv2.INTER_AREA
    assert cam.CameraTransform((64, 64), roi=(100, 50, 300, 200)).window(480, 640) == (150, 50, 200, 200)
    assert cam.CameraTransform((48, 64), crop="none").window(480, 640) == (0, 0, 640, 480)
    assert cam.CameraTransform((256, 256)).flag(199, 199) == cv2.INTER_LINEAR
    rgb = source_frame("x", 64, 64)
    assert t.apply(rgb) is not rgb and np.array_equal(t.apply(rgb), rgb)  # right size: untouched
    for bad, field in (({"crop": "fill"}, "camera.crop"), ({"interpolation": "lanczos"}, "camera.interpolation"),
                       ({"roi": [0, 0, 0, 10]}, "camera.roi"), ({"zoom": 2}, "camera.zoom")):
        with pytest.raises(EnvError, match=field):
            RobotEnvConfig(camera=bad)
    with pytest.raises(cam.CameraError, match="does not fit"):
        cam.CameraTransform((64, 64), roi=(600, 0, 100, 100)).window(480, 640)
    broken = rt.msg_class("sensor_msgs/msg/CompressedImage")(header=rt.header(), format="jpeg",
                                                             data=np.frombuffer(b"not a jpeg", np.uint8))
    with pytest.raises(cam.CameraError, match="not a valid jpeg"):
        t(broken)
    depth = rt.msg_class("sensor_msgs/msg/Image")(header=rt.header(), height=4, width=4, encoding="16UC1",
                                                  is_bigendian=0, step=8, data=np.zeros(32, np.uint8))
    assert "16UC1" in cam.check(depth) and "allowed: rgb8" in cam.check(depth)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60.0)
    camera_robot(p.parse_args().seconds)
