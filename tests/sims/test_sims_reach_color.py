"""ReachColor: the instruction names the goal among a red and a blue sphere; reaching the other
one is a failure. Goal markers (spheres, poles) are visual only."""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from sims.mujoco.tasks.reach_color import REACH_COLOR_LAYOUT as L
from sims.registry import expert_for, make_env


def _run(env, obs, swap: bool):
    """Drive every env with the expert towards the named sphere (swap: towards the other one)
    until its first episode ends; returns (success, fail) bool [B]."""
    expert = expert_for("ReachColor")
    B = env.num_envs
    done, success, fail = (np.zeros(B, bool) for _ in range(3))
    for _ in range(env.spec.max_episode_steps):
        priv = obs["privileged"].numpy().copy()
        if swap:
            priv[:, L["goal_minus_tcp"]] = priv[:, L["other_minus_tcp"]]
        r = env.step(torch.from_numpy(expert(priv)))
        new = r.done.numpy() & ~done
        success[new], fail[new] = r.info["success"].numpy()[new], r.info["fail"].numpy()[new]
        done |= new
        obs = r.obs
    assert done.all()
    return success, fail


def test_only_the_named_sphere_counts():
    env = make_env("ReachColor", 8)
    obs, _ = env.reset(seed=list(range(8)))
    assert {s.split()[2] for s in obs["instruction"]} == {"red", "blue"}
    assert all(s in ("reach the red target", "reach the blue target") for s in obs["instruction"])
    success, fail = _run(env, obs, swap=False)
    assert success.all() and not fail.any()
    obs, _ = env.reset(seed=list(range(8)))
    success, fail = _run(env, obs, swap=True)  # the other sphere: terminated as a failure
    assert fail.all() and not success.any()
    env.close()


def test_named_sphere_matches_the_colour():
    """The privileged goal is the sphere whose colour the instruction names: red = mocap "goal"."""
    env = make_env("ReachColor", 16)
    obs, _ = env.reset(seed=list(range(16)))
    mocap = env._batch.bind("mocap_pos")
    h = env._h
    for i, text in enumerate(obs["instruction"]):
        red, blue = mocap[i, h.goal_mocap], mocap[i, h.target_mocap]
        named, other = (red, blue) if "red" in text else (blue, red)
        np.testing.assert_allclose(obs["privileged"][i, L["goal"]].numpy(), named, atol=1e-6)
        np.testing.assert_allclose(obs["privileged"][i, L["other"]].numpy(), other, atol=1e-6)
        assert np.linalg.norm(red - blue) >= 0.15 and red[0] < 0 < blue[0]  # red left, blue right
    env.close()


def test_goal_markers_are_visual_only_and_visible():
    for task in ("Reach", "ReachColor"):
        env = make_env(task, 2, obs_mode="rgb", image_size=64)
        m = env.model
        names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) for g in range(m.ngeom)]
        markers = [g for g, n in enumerate(names) if n and n.startswith(("goal", "target"))]
        assert len(markers) == (2 if task == "Reach" else 4)  # spheres and their poles
        assert (m.geom_contype[markers] == 0).all() and (m.geom_conaffinity[markers] == 0).all()
        img = env.reset(seed=[0, 1])[0]["rgb_front"].numpy().astype(int)
        r, g, b = img[..., 0], img[..., 1], img[..., 2]
        if task == "ReachColor":  # both spheres and poles show in the front camera
            assert ((r > 150) & (g < 80) & (b < 80)).sum(axis=(1, 2)).min() >= 8
            assert ((b > 150) & (r < 80)).sum(axis=(1, 2)).min() >= 8
        else:
            assert ((g > 150) & (r < 80) & (b < 120)).sum(axis=(1, 2)).min() >= 8
        env.close()
