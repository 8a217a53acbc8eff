"""Recording: robot episodes into the episode dataset format (rosbag2 files: test_bags_ingest.py)."""

from __future__ import annotations

import pytest
import torch

from embodied.data.dataset import read_episodes, read_meta
from robot_bridge.recorder import RecordingEnv
from sims.registry import expert_for, make_env
from sims.vecenv import EnvError


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
