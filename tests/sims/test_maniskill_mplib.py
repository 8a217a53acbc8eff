"""mplib motion planning for ManiSkill: the planning worker in its own venv (.venv-mplib, numpy
1.x; `make maniskill` builds it), its paths executed in the env, and the motion-planning experts
feeding `embodied collect` in pd_joint_delta_pos.

On CPU these run on physx_cpu with Mesa lavapipe, like tests/sims/test_maniskill.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from embodied.data.collect import collect_demos
from embodied.data.dataset import read_episodes
from sims.maniskill import planner as planner_mod
from sims.maniskill.expert import state_layout
from sims.maniskill.mplib_expert import DT, GAIN, JOINT_STEP
from sims.registry import expert_for, make_env
from test_sims_contract import _one_line_error

TASK = "ms:PickCube-v1@pd_joint_delta_pos"


@pytest.fixture(scope="module")
def planner():
    p = planner_mod.MplibPlanner()
    yield p
    p.close()


def _angle(q1: np.ndarray, q2: np.ndarray) -> float:
    """Angle (rad) between two wxyz quaternions."""
    r1, r2 = (Rotation.from_quat(np.asarray(q)[[1, 2, 3, 0]]) for q in (q1, q2))
    return float((r1.inv() * r2).magnitude())


def test_worker_runs_numpy1_and_fk_matches_the_env(planner):
    reply = planner.request(op="ping")
    assert reply["ok"] and reply["dof"] == 7
    assert reply["versions"]["numpy"].startswith("1.") and reply["versions"]["mplib"] == "0.2.1"
    env = make_env(TASK, 1, num_threads=1)
    obs, _ = env.reset(seed=2)
    L = state_layout("PickCube-v1")
    row = obs["privileged"][0].numpy().astype(np.float64)
    base = planner.base_pose(row[L["qpos"]], row[L["tcp_pose"]])
    # ManiSkill places the Panda's base at (-0.615, 0, 0), unrotated, in PickCube
    assert np.allclose(base[:3], [-0.615, 0, 0], atol=1e-3) and _angle(base[3:], [1, 0, 0, 0]) < 1e-3
    env.close()


@pytest.mark.parametrize("method", ["screw", "pose"])
def test_planned_path_reaches_the_pose_in_the_env(planner, method):
    """A real plan: executed in pd_joint_delta_pos, the env's TCP ends at the requested pose."""
    env = make_env(TASK, 1, num_threads=1)
    obs, _ = env.reset(seed=5)
    L = state_layout("PickCube-v1")
    row = obs["privileged"][0].numpy().astype(np.float64)
    q, tcp = row[L["qpos"]], row[L["tcp_pose"]]
    base = planner.base_pose(q, tcp)
    yaw = Rotation.from_euler("z", 0.4) * Rotation.from_quat([1.0, 0.0, 0.0, 0.0])  # down, turned
    x, y, z, w = yaw.as_quat()
    goal = np.r_[tcp[:3] + [0.08, -0.12, -0.06], w, x, y, z]
    path, how = planner.plan(q, goal, base, method=method, time_step=DT, vel=0.7, acc=6.0)
    assert path is not None and how == method, how
    assert path.ndim == 2 and path.shape[1] == 7 and len(path) >= 5
    assert np.allclose(path[0], q[:7], atol=1e-3)
    assert np.abs(np.diff(path, axis=0)).max() <= 0.7 * DT + 1e-3  # the joint speed limit
    for k in range(len(path) + 15):
        cur = obs["state"][0, :7].numpy().astype(np.float64)
        a = np.zeros((1, 8), np.float32)
        a[0, :7] = np.clip(GAIN * (path[min(k + 1, len(path) - 1)] - cur) / JOINT_STEP, -1, 1)
        a[0, 7] = 1.0
        obs = env.step(torch.from_numpy(a)).obs
    end = obs["privileged"][0].numpy().astype(np.float64)[L["tcp_pose"]]
    assert np.linalg.norm(end[:3] - goal[:3]) < 0.01, (end, goal)
    assert _angle(end[3:], goal[3:]) < 0.05
    env.close()


def test_pose_inside_the_table_is_a_failure_with_a_reason(planner):
    """The planner's world has the table (top at z = 0): a TCP pose 5 cm below it is refused."""
    q = np.array([0.0, 0.4, 0.0, -1.9, 0.0, 2.3, 0.8, 0.04, 0.04])
    path, reason = planner.plan(q, np.r_[0.0, 0.0, -0.05, 0.0, 1.0, 0.0, 0.0], [-0.615, 0, 0, 1, 0, 0, 0])
    assert path is None and "screw" in reason and "pose" in reason, reason


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
@pytest.mark.parametrize("task", ["ms:PickCube-v1@pd_joint_delta_pos", "ms:PushCube-v1@pd_joint_delta_pos"])
def test_mplib_expert_demos_through_collect(task, tmp_path):
    """The motion-planning experts feed `embodied collect` and succeed in at least 90% of episodes;
    a recorded episode replays to success from its seed."""
    summary = collect_demos(task, 10, tmp_path / "demos", seed=0, num_envs=10, only_success=True)
    assert summary["episodes"] == 10
    assert summary["expert_success_rate"] >= 0.9, summary
    episode = next(read_episodes(tmp_path / "demos"))
    assert episode["action"].shape[1] == 8 and episode["action"].abs().max() <= 1.0
    env = make_env(task, 1, num_threads=1)
    env.reset(seed=int(episode["seed"]))
    for a in episode["action"]:
        r = env.step(a[None].float())
    assert bool(r.info["success"][0])
    env.close()


def test_errors_are_one_line(monkeypatch, tmp_path):
    _one_line_error(lambda: expert_for("ms:StackCube-v1@pd_joint_delta_pos"), "no motion-planning expert",
                    "ms:PickCube-v1")
    from sims.maniskill.mplib_expert import expert_for as mplib_expert_for

    _one_line_error(lambda: mplib_expert_for("ms:PickCube-v1"), "pd_joint_delta_pos")
    monkeypatch.setattr(planner_mod, "VENV", tmp_path / "no-venv")
    _one_line_error(lambda: expert_for(TASK), "planner venv", "make maniskill")


@pytest.mark.scale  # about 1 min: `make bench-scale`, not `make test`
def test_vla_pipeline_runs_on_maniskill(tmp_path):
    """configs/pipeline/pipeline_ms_pickcube.yaml on a tiny budget: mplib demos with RGB, SFT of a flow
    VLA with ManiSkill's widths (state 18, action 8), PPO with Flow-Noise, evaluation."""
    import json
    from pathlib import Path

    from embodied.cli import main

    rc = main(["pipeline", "pipeline_ms_pickcube", f"run_dir={tmp_path}", "collect.episodes=2",
               "collect.image_size=32", "sft.steps=5", "sft.batch_size=8", "sft.warmup_steps=2",
               "rl.env.image_size=32", "rl.env.num_envs=2", "rl.env.num_threads=1", "rl.ppo.rollout_steps=2",
               "rl.train.total_steps=8", "rl.train.eval_episodes=1", "rl.train.video_episodes=0",
               "rl.train.progress=false"])
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    cfg = json.loads((Path(summary["sft_checkpoint"]) / "config.json").read_text())["config"]
    assert (cfg["state_dim"], cfg["action_dim"]) == (18, 8)
    assert 0.0 <= summary["success_rl"] <= 1.0
