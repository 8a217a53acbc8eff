"""End to end over real DDS on loopback, three processes: policy node -> bridge -> sim robot.

A Reach checkpoint is trained in the fixture; its success rate served over ROS 2 against the
sim robot node must be within 10 points of the same policy evaluated directly in simulation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from robot_bridge.transport import loopback_env

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
    env = {**os.environ, **loopback_env(directory=tmp_path), "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    return env


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_served_policy_matches_simulation(reach_checkpoint, dds_env, tmp_path):
    import torch

    from embodied.data.dataset import read_episodes, read_meta
    from embodied.eval.evaluate import evaluate
    from embodied.rl.loop_parts import eval_seeds
    from policies.base import Policy
    from sims.registry import make_env

    policy = Policy.from_pretrained(reach_checkpoint / "policy")
    policy.eval()
    torch.set_num_threads(1)
    direct = evaluate(policy, make_env("Reach", 1, num_threads=1), eval_seeds(EPISODES)).success_rate

    sim = subprocess.Popen([sys.executable, "-m", "embodied.cli", "robot-sim", "Reach", "--transport", "dds",
                            "--image-size", "0", "--rate", "50"], env=dds_env, cwd=ROOT)
    try:
        out = subprocess.run([sys.executable, "-m", "embodied.cli", "serve", str(reach_checkpoint), "--episodes",
                              str(EPISODES), "--rate", "50", "--transport", "dds", "--record", str(tmp_path / "rec")],
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
