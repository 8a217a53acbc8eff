"""Every task's scripted expert solves at least 95% of 100 seeded episodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sims.registry import expert_for, list_tasks, make_env


def first_episode_success(task: str, seeds: list[int]) -> np.ndarray:
    """bool [len(seeds)]: whether the expert's first episode from each seed succeeded."""
    env = make_env(task, len(seeds))
    obs, _ = env.reset(seed=seeds)
    expert = expert_for(task)
    success = np.zeros(len(seeds), bool)
    finished = np.zeros(len(seeds), bool)
    for _ in range(env.spec.max_episode_steps):
        r = env.step(torch.from_numpy(expert(obs["privileged"].numpy())))
        new = r.done.numpy() & ~finished
        success[new] = r.info["success"].numpy()[new]
        finished |= new
        obs = r.obs
    assert finished.all()  # every episode ends within its time limit
    env.close()
    return success


@pytest.mark.parametrize("task", list_tasks())
def test_expert_success(task):
    success = first_episode_success(task, list(range(100)))
    assert success.mean() >= 0.95, f"{task}: expert success {success.mean():.2f}"
