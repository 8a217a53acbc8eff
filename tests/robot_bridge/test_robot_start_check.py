"""Before the first step, `serve`, `sim2real --robot` and `finetune-robot` check that the robot
gives every camera and state key the policy reads, and refuse in one line (robot_check.py).

The robot is a real rclpy node on Fast DDS (ROS 2 Jazzy's wheels, tests/robot_bridge/
ros2_one_camera.py) with a front camera and no wrist camera; the policy reads both. `serve` runs
as a user would run it on the rclpy transport: the side venv's `embodied` command, from a
directory outside the repository. sim2real's and finetune-robot's checks run in this process on
the DDS transport. Skipped without `make ros2`. And the other side: the twin publishes every
camera, so the same policy is served to `embodied robot-sim` (`make bench-scale`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from robot_bridge.transport import fastdds_loopback_env, loopback_env

ROOT = Path(__file__).resolve().parents[2]
JAZZY = ROOT / ".venv-ros-jazzy" / "bin"
WRIST = {"front": "/camera/image_raw", "wrist": "/camera/wrist/image_raw"}


@pytest.fixture(scope="module")
def robot(tmp_path_factory):
    """The one-camera rclpy robot on loopback; this process's DDS participants join its domain."""
    if not (JAZZY / "embodied").exists():
        pytest.skip(".venv-ros-jazzy (with its `embodied` command) missing: build it with `make ros2`")
    tmp = tmp_path_factory.mktemp("robot")
    env = {**os.environ, **loopback_env(directory=tmp), **fastdds_loopback_env(tmp), "ROS_DISTRO": "jazzy"}
    env.pop("FASTDDS_DEFAULT_PROFILES_FILE")  # Jazzy's Fast DDS 2 reads FASTRTPS_DEFAULT_PROFILES_FILE
    env.pop("PYTHONPATH", None)
    old = {k: os.environ.get(k) for k in ("CYCLONEDDS_URI", "ROS_DOMAIN_ID")}
    os.environ.update({k: env[k] for k in old})
    proc = subprocess.Popen([str(JAZZY / "python"), str(ROOT / "tests" / "robot_bridge" / "ros2_one_camera.py")],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout.readline().strip() == "robot up"
        yield env
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def two_camera_policy(tmp_path_factory):
    """A policy directory reading the front and the wrist camera, as the README's two-camera Reach
    VLA does (a small CNN policy here: it loads fast; the check runs before it acts)."""
    from embodied.config import PolicyConfig
    from policies.registry import build_policy
    from sims.vecenv import EnvSpec

    spec = EnvSpec(task="Reach", num_envs=1, action_dim=4, state_dim=9, privileged_dim=15, max_episode_steps=50,
                   control_hz=20.0, cameras=("front", "wrist"), image_size=(64, 64))
    policy = build_policy(PolicyConfig(name="cnn"), spec)
    policy.record = {"task": "Reach", "obs_mode": "rgb", "obs_keys": ["state", "rgb_front", "rgb_wrist"],
                     "action_dim": 4}
    path = tmp_path_factory.mktemp("policy") / "final"
    policy.save_pretrained(path)
    return path


def _one_line(msg: str) -> None:
    assert "\n" not in msg
    assert "needs rgb_wrist, which the robot does not give" in msg, msg
    assert "nothing on /camera/wrist/image_raw" in msg and "rgb_front (/camera/image_raw)" in msg, msg
    assert "state (/joint_states)" in msg and "image topics on the graph: /camera/image_raw" in msg, msg


def test_serve_refuses_a_robot_without_the_wrist_camera(robot, two_camera_policy, tmp_path):
    """The documented rclpy command (docs/ros2.md), run from outside the repository."""
    out = subprocess.run([str(JAZZY / "embodied"), "serve", str(two_camera_policy), "--episodes", "1",
                          "--transport", "rclpy"], cwd=tmp_path, env=robot, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    errors = [x for x in out.stderr.splitlines() if "error:" in x]
    assert len(errors) == 1 and errors[0].startswith("embodied serve: error: robot: checkpoint "), out.stderr
    _one_line(errors[0])
    kilted = ROOT / ".venv-ros-kilted" / "bin" / "embodied"  # the other side venv's command, and python -m
    for argv in ([str(JAZZY / "python"), "-m", "embodied"], [str(kilted)] if kilted.exists() else []):
        if argv:
            out = subprocess.run([*argv, "serve", "--help"], cwd=tmp_path, env=robot, capture_output=True,
                                 text=True, timeout=60)
            assert out.returncode == 0 and "--transport" in out.stdout, out.stderr[-2000:]


def test_sim2real_robot_and_finetune_robot_refuse(robot, two_camera_policy, tmp_path, monkeypatch):
    import yaml

    from embodied.eval.sim2real_robot import Sim2RealError, robot_config_from_file, run_robot
    from embodied.run.load import load_trained
    from robot_bridge import robot_check
    from robot_bridge.robot_env import RobotEnv, RobotEnvConfig

    monkeypatch.setattr(robot_check, "START_TIMEOUT_S", 2.0)
    # the check passes for what the robot gives: its joint states and its front camera
    env = RobotEnv(RobotEnvConfig(task="Reach", image_topics={"front": WRIST["front"]}, transport="dds"))
    try:
        robot_check.check_robot_gives(env, ["state", "rgb_front"], timeout_s=20.0)
    finally:
        env.close()
    # sim2real --robot: a robot config that names both cameras, one of which never publishes
    ckpt, cfg, policy = load_trained(two_camera_policy)
    (tmp_path / "robot.yaml").write_text(yaml.safe_dump({"task": "Reach", "image_topics": WRIST, "transport": "dds",
                                                         "image_size": [64, 64], "reset_timeout_s": 2}))
    rc = robot_config_from_file(tmp_path / "robot.yaml", cfg, "vla", policy.record)
    with pytest.raises(Sim2RealError) as e:
        run_robot(policy, rc, [0])
    _one_line(str(e.value))
    # finetune-robot: a camera policy on rgb_wrist + state
    from embodied.robot_rl.actor import Actor
    from embodied.robot_rl.config import config_from_dict
    from embodied.robot_rl.data import save_policy
    from embodied.robot_rl.networks import TanhGaussianActor

    run = tmp_path / "run"
    run.mkdir()
    save_policy(run / "policy.safetensors", TanhGaussianActor(16 * 16 * 3 + 9, 4, (16,), image=(16, 16)), 0, (16,))
    cfg = config_from_dict({"run_dir": str(run), "obs_key": "rgb_wrist+state",
                            "robot": {"image_topics": WRIST, "image_size": [16, 16], "transport": "dds",
                                      "reset_timeout_s": 2}})
    actor = Actor(cfg)
    try:
        summary = actor.run()  # checks before the first reset, ends in one line with exit status 2
    finally:
        actor.close()
    assert summary["exit_code"] == 2 and summary["episodes"] == 0
    _one_line(summary["ended"])


@pytest.mark.scale  # about 20 s of CPU (a twin rendering two cameras, one served episode): `make bench-scale`
def test_serve_a_two_camera_policy_to_robot_sim(two_camera_policy, tmp_path, monkeypatch):
    """What the issue's new user tried: `embodied robot-sim Reach`, then `embodied serve` of a policy
    reading the front and the wrist camera. The twin publishes both, and an episode runs (before:
    KeyError 'rgb_wrist')."""
    import sys

    from embodied.deploy.serve import serve

    for k, v in loopback_env(directory=tmp_path).items():
        monkeypatch.setenv(k, v)
    twin = subprocess.Popen([sys.executable, "-m", "embodied.cli", "robot-sim", "Reach", "--transport", "dds",
                             "--rate", "50"], env={**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)},
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert twin.stdout.readline().startswith("robot-sim: Reach on domain")  # up, as a user waits for it
        summary = serve(two_camera_policy, episodes=1, control_hz=100.0, transport="dds", device="cpu")
    finally:
        twin.terminate()
        twin.wait(10)
    assert summary["episodes"] == 1 and summary["episode_length"] >= 1
