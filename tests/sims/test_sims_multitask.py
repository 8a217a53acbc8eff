"""Several tasks in one batch (sims/multitask.py, "multi:A+B"): layout, seeds, experts, resume,
bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sims.registry import expert_for, make_env
from sims.vecenv import EnvError

TASK = "multi:Reach+PushCube+Compose"


def test_rows_layout_instructions_and_labels():
    env = make_env(TASK, 6, seed=0)
    obs, _ = env.reset(seed=10)
    assert env.spec.privileged_dim == 49 and env.spec.max_episode_steps == 60 and env.row_tasks == (
        "Reach", "Reach", "PushCube", "PushCube", "Compose", "Compose")
    assert obs["privileged"].shape == (6, 49) and (obs["privileged"][:2, 15:] == 0).all()  # Reach's 15, padded
    assert obs["instruction"][0] == "move the gripper to the target" and "cube" in obs["instruction"][2]
    labels = env.task_labels()
    assert labels[:4] == ["Reach", "Reach", "PushCube", "PushCube"] and all(" " in t for t in labels[4:])
    # a row's seed gives the same start as its task alone (seed 10 + row index)
    alone, _ = make_env("PushCube", 2).reset(seed=[12, 13])
    assert torch.equal(obs["privileged"][2:4, :32], alone["privileged"])


def test_expert_resume_and_chunks():
    env, ex = make_env(TASK, 6, seed=0), expert_for(TASK)
    obs, _ = env.reset(seed=0)
    won, done = np.zeros(6, bool), np.zeros(6, bool)
    for _ in range(env.spec.max_episode_steps):
        r = env.step(torch.from_numpy(ex(obs["privileged"].numpy())))
        new = r.done.numpy() & ~done
        won[new], done, obs = r.info["success"].numpy()[new], done | new, r.obs
    assert won.all()
    state = env.state_dict()
    acts = [torch.rand(6, 3, 4) * 2 - 1 for _ in range(6)]
    first = [env.chunk_step(a) for a in acts]
    env.load_state_dict(state)
    for a, r in zip(acts, first):
        again = env.chunk_step(a)
        assert torch.equal(again.obs["privileged"], r.obs["privileged"]) and torch.equal(again.reward, r.reward)
        assert again.obs["instruction"] == r.obs["instruction"]


def test_bad_input():
    for task, n, words in (("multi:Reach", 2, "two or more"), ("multi:Reach+Reach", 2, "distinct"),
                           (TASK, 4, "multiple of 3"), ("multi:Reach+Nope", 2, "Nope")):
        with pytest.raises(EnvError) as err:
            make_env(task, n)
        assert "\n" not in str(err.value) and words in str(err.value), str(err.value)
