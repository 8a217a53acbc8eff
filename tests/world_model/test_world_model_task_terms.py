"""The task terms of sims/world_model/task_terms.py equal the simulator's own: on PushCube
episodes of the expert (which succeed) and of random actions, progress differences plus the
success bonus give the simulator's dense reward, and success / failure its flags."""

from __future__ import annotations

import numpy as np
import torch

from sims.registry import expert_for, make_env
from sims.world_model.task_terms import push_cube


def test_push_cube_terms_match_the_simulator():
    env = make_env("PushCube", 16)
    expert = expert_for("PushCube")
    rng = np.random.default_rng(0)
    checked = succeeded = 0
    obs, _ = env.reset(seed=list(range(16)))
    for t in range(60):
        x0 = obs["privileged"].numpy()
        act = expert(x0) if t < 40 else rng.uniform(-1, 1, (16, 4))  # the expert, then random actions
        res = env.step(torch.from_numpy(act.astype(np.float32)))
        x1 = (res.final_obs["privileged"] if res.final_obs is not None else res.obs["privileged"]).numpy()
        x1 = np.where(res.done.numpy()[:, None], x1, res.obs["privileged"].numpy())
        p0, _, _ = push_cube(x0)
        p1, succ, fail = push_cube(x1)
        np.testing.assert_allclose(p1 - p0 + succ, res.reward.numpy(), atol=2e-5)
        np.testing.assert_array_equal(succ, res.info["success"].numpy())
        np.testing.assert_array_equal(succ | fail, res.terminated.numpy())
        checked += 16
        succeeded += int(succ.sum())
        obs = res.obs
    env.close()
    assert succeeded >= 10 and checked == 960
