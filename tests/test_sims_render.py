"""Rendering stays correct when envs (and their GL contexts) come and go in one process."""

import gc

import numpy as np

from sims.registry import make_env


def first_frame(task: str, seeds):
    env = make_env(task, len(seeds), obs_mode="rgb", image_size=64)
    obs, _ = env.reset(seed=seeds)
    return obs["rgb_front"].numpy(), env


def test_frames_identical_after_other_envs_are_freed():
    ref, env = first_frame("PushCube", [5, 6])
    del env
    gc.collect()
    for task in ("Reach", "PushCube", "PushCube"):
        frames, env = first_frame(task, [5, 6])  # the previous env is freed here
        if task == "PushCube":
            np.testing.assert_array_equal(frames, ref)
    # two live envs side by side agree as well
    other, env2 = first_frame("PushCube", [5, 6])
    np.testing.assert_array_equal(other, ref)


def test_different_seeds_differ():
    frames, _ = first_frame("PushCube", [5, 7])
    assert np.abs(frames[0].astype(int) - frames[1].astype(int)).max() > 50
