"""End to end over ROS 2 on loopback, three processes: policy node -> bridge -> sim robot.

A Reach checkpoint is trained in the fixture; its success rate served over ROS 2 against the
sim robot node must be within 10 points of the same policy evaluated directly in simulation,
with the episodes recorded. Over the DDS transport, over rclpy (ROS 2 Jazzy's wheels, Fast DDS;
skipped without `make ros2`), and mixed (twin on DDS, policy node on rclpy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from robot_bridge.transport import fastdds_loopback_env, loopback_env

ROOT = Path(__file__).resolve().parents[2]
EPISODES = 10


@pytest.fixture(scope="module")
def reach_checkpoint(tmp_path_factory):
    from embodied.run.checkpoint import resolve_checkpoint
    from embodied.config import load_config
    from embodied.rl.train import train

    run_dir = tmp_path_factory.mktemp("reach_run")
    train(load_config(ROOT / "configs" / "ppo" / "ppo_reach.yaml",
                      ["train.total_steps=60000", f"train.run_dir={run_dir}", "train.progress=false",
                       "train.eval_every=0", "train.video_episodes=0"]))
    return resolve_checkpoint(run_dir)


@pytest.fixture
def dds_env(tmp_path):
    env = {**os.environ, **loopback_env(directory=tmp_path), **fastdds_loopback_env(tmp_path), "MUJOCO_GL": "egl",
           "PYTHONPATH": str(ROOT), "ROS_DISTRO": "jazzy"}
    env.pop("FASTDDS_DEFAULT_PROFILES_FILE")  # Jazzy's Fast DDS 2 reads FASTRTPS_DEFAULT_PROFILES_FILE
    return env


def _python(transport: str) -> str:
    """The main venv's python for DDS; the ROS 2 Jazzy venv's (rclpy + the toolkit) for rclpy."""
    if transport == "dds":
        return sys.executable
    py = ROOT / ".venv-ros-jazzy" / "bin" / "python"
    if not py.exists():
        pytest.skip(".venv-ros-jazzy missing: build it with `make ros2`")
    return str(py)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("twin,server", [("dds", "dds"), ("rclpy", "rclpy"), ("dds", "rclpy")])
def test_served_policy_matches_simulation(reach_checkpoint, dds_env, tmp_path, twin, server):
    import torch

    from embodied.data.dataset import read_episodes, read_meta
    from embodied.eval.evaluate import evaluate
    from embodied.run.env import eval_seeds
    from policies.base import Policy
    from sims.registry import make_env

    policy = Policy.from_pretrained(reach_checkpoint / "policy")
    policy.eval()
    torch.set_num_threads(1)
    direct = evaluate(policy, make_env("Reach", 1, num_threads=1), eval_seeds(EPISODES)).success_rate

    sim = subprocess.Popen([_python(twin), "-m", "embodied.cli", "robot-sim", "Reach", "--transport", twin,
                            "--image-size", "0", "--rate", "50"], env=dds_env, cwd=ROOT)
    try:
        out = subprocess.run([_python(server), "-m", "embodied.cli", "serve", str(reach_checkpoint), "--episodes",
                              str(EPISODES), "--rate", "50", "--transport", server, "--record", str(tmp_path / "rec")],
                             env=dds_env, cwd=ROOT, capture_output=True, text=True, timeout=150)
    finally:
        _stop(sim)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout[out.stdout.index("{"):])
    assert summary["episodes"] == EPISODES
    assert direct >= 0.8, f"checkpoint too weak to compare: {direct}"
    assert abs(summary["success_rate"] - direct) <= 0.10, (summary, direct)
    # The policy's mean may exceed [-1, 1] (the simulator clips it; the safety layer clamps it);
    # nothing else needed an intervention.
    assert set(summary["safety_interventions"]) <= {"range"}
    meta = read_meta(tmp_path / "rec")
    assert len(meta["episodes"]) == EPISODES and meta["embodied"]["task"] == "Reach"
    first = next(read_episodes(tmp_path / "rec"))
    assert first["obs.privileged"].shape[1] == 15 and first["action"].shape[1] == 4


def test_sim2real_robot_on_rclpy(reach_checkpoint, dds_env, tmp_path):
    """`embodied sim2real --robot` with the robot's config on the rclpy transport (Jazzy) and the
    twin on rclpy: seeded topic resets, so the robot's episodes repeat the simulation's."""
    py = _python("rclpy")
    robot = tmp_path / "robot.yaml"
    robot.write_text("task: Reach\nprivileged_topic: /privileged\nprivileged_dim: 15\ncontrol_hz: 200\n"
                     "max_episode_steps: 50\ntransport: rclpy\nreset_timeout_s: 60\nobs_timeout_s: 5\n"
                     "safety: {control_hz: 200}\n")
    sim = subprocess.Popen([py, "-m", "embodied.cli", "robot-sim", "Reach", "--transport", "rclpy", "--image-size", "0"],
                           env=dds_env, cwd=ROOT)
    try:
        out = subprocess.run([py, "-m", "embodied.cli", "sim2real", str(reach_checkpoint), "--task", "Reach", "--robot",
                              str(robot), "--trials", "4", "--no-videos", "--out", str(tmp_path / "out")],
                             env=dds_env, cwd=ROOT, capture_output=True, text=True, timeout=150)
    finally:
        _stop(sim)
    assert out.returncode == 0, out.stderr[-2000:]
    eps = json.loads((tmp_path / "out" / "results.json").read_text())["episodes"]
    pick = (lambda c: [(e["seed"], e["success"], e["length"]) for e in eps if e["condition"] == c])
    robot, nominal = pick("robot"), pick("nominal")
    assert len(robot) == 4 and [r[:2] for r in robot] == [n[:2] for n in nominal], (robot, nominal)
    # equal lengths when the machine is quiet; under heavy load (2 cores at load 15-20) an episode
    # was measured one step longer on rclpy (docs/ros2.md), never more
    assert all(abs(r[2] - n[2]) <= 1 for r, n in zip(robot, nominal)), (robot, nominal)
