"""The gym: family (sims/gym, docs/gym.md): gymnasium's three auto-reset modes translated alike, the
mapping (presets, a YAML file, bad input in one line), the Reacher expert with `collect`, and the
env in a side venv through the side-venv base against the same env in this process. The contract
itself runs in tests/sims/test_sims_contract.py (gym:Reacher-v5, gym:Pusher-v5); PPO learning
Reacher, `eval` and `sim2real` on its checkpoint in tests/rl/test_gym_ppo.py."""

from __future__ import annotations

import json

import pytest
import torch

from sims.metaworld.proc import metaworld_python
from sims.registry import expert_for, make_env
from sims.vecenv import EnvError


def _run(env, steps: int, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    obs, _ = env.reset(seed=[5, 6, 7])
    out = [obs["privileged"]]
    for _ in range(steps):
        r = env.step(torch.rand(3, env.spec.action_dim, generator=g) * 2 - 1)
        fin = r.final_obs["privileged"] if r.final_obs is not None else None
        out += [r.obs["privileged"], r.reward, r.terminated, r.truncated, fin]
    return out


def _same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x is None) == (y is None) and (x is None or torch.equal(x, y))


def test_autoreset_modes_translate_alike():
    """next_step, same_step and disabled (and make_vec's sync vectorisation) give the same
    episodes, auto-resets and final observations: a new episode starts from our seed stream."""
    runs = {}
    for vector, mode in (("single", "next_step"), ("single", "same_step"), ("single", "disabled"), ("sync", "next_step")):
        with make_env("gym:Reacher-v5", 3, max_episode_steps=4, mapping={"vector": vector, "autoreset": mode}) as env:
            runs[vector, mode] = _run(env, 10)
    first = runs["single", "next_step"]
    assert sum(x is not None for x in first[5::5]) == 2  # two auto-resets in 10 steps of 4-step episodes
    for key, run in runs.items():
        _same(first, run)
    # a chunk equals its steps across an auto-reset, in a mode that resets inside the step
    with make_env("gym:Reacher-v5", 3, max_episode_steps=4, mapping={"autoreset": "same_step"}) as a, \
            make_env("gym:Reacher-v5", 3, max_episode_steps=4) as b:
        a.reset(seed=1), b.reset(seed=1)
        acts = torch.rand(3, 6, 2, generator=torch.Generator().manual_seed(2)) * 2 - 1
        rc = a.chunk_step(acts[:, :4])
        rs = [b.step(acts[:, k]) for k in range(4)]
        assert rc.valid.all() and rc.truncated[:, 3].all() and torch.equal(rc.obs["privileged"], rs[-1].obs["privileged"])
        assert torch.equal(rc.final_obs["privileged"], rs[-1].final_obs["privileged"])


def test_mapping_presets_file_and_bad_input(tmp_path):
    with make_env("gym:Reacher-v5", 2) as env:
        obs, _ = env.reset(seed=0)
        assert (env.spec.state_dim, env.spec.privileged_dim, env.spec.action_dim) == (6, 10, 2)
        assert obs["instruction"] == ["touch the target with the fingertip"] * 2
    path = tmp_path / "map.yaml"
    path.write_text("env_id: Reacher-v5\nstate: [6, 7]\nprivileged: [8, 9]\nreward_scale: 2.0\n")
    with make_env(f"gym:{path}", 2) as env, make_env("gym:Reacher-v5", 2) as ref:
        o, _ = env.reset(seed=3)
        p, _ = ref.reset(seed=3)
        assert torch.equal(o["state"], p["privileged"][:, 4:6]) and torch.equal(o["privileged"][:, 2:], p["privileged"][:, 8:])
        a = torch.full((2, 2), 0.5)
        assert torch.allclose(env.step(a).reward, 2 * ref.step(a).reward)
    for fn, words in ((lambda: make_env("gym:Reacher-v5", 2, mapping={"colour": 1}), ("mapping.colour", "allowed")),
                      (lambda: make_env("gym:Reacher-v5", 2, mapping={"state": [11]}), ("mapping.state", "0..9")),
                      (lambda: make_env("gym:Reacher-v5", 2, mapping={"autoreset": "later"}), ("mapping.autoreset",)),
                      (lambda: make_env("gym:NoSuchEnv-v0", 2), ("gym:NoSuchEnv-v0",)),
                      (lambda: make_env("gym:Reacher-v5", 2, randomization={"x": 1}), ("env.randomization",)),
                      (lambda: expert_for("gym:Pusher-v5"), ("no scripted expert", "gym:Reacher-v5"))):
        with pytest.raises(EnvError) as e:
            fn()
        assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


def test_expert_reaches_and_collect_writes_episodes(tmp_path):
    """The Reacher expert (Jacobian-transpose PD) beats holding still, and `collect` records it
    (rendered frames of the `render` camera), as for any task with an expert."""
    from embodied.data.collect import collect_demos

    with make_env("gym:Reacher-v5", 16) as env:
        ex, obs = expert_for("gym:Reacher-v5"), env.reset(seed=0)[0]
        ret, hit = torch.zeros(16), torch.zeros(16, dtype=torch.bool)
        for _ in range(env.spec.max_episode_steps):
            r = env.step(torch.from_numpy(ex(obs["privileged"].numpy())))
            ret, hit, obs = ret + r.reward, hit | r.info["success"], r.obs
        zero = torch.zeros(16)
        env.reset(seed=0)
        for _ in range(env.spec.max_episode_steps):
            zero += env.step(torch.zeros(16, 2)).reward
    assert ret.mean() > zero.mean() + 3 and hit.float().mean() > 0.2  # measured: -6.3 vs -11.9, 0.41
    out = collect_demos("gym:Reacher-v5", 1, tmp_path / "demos", obs_mode="rgb", image_size=32, only_success=False,
                        progress=False)
    meta = json.loads((tmp_path / "demos" / "meta" / "info.json").read_text())
    assert out and meta["total_episodes"] == 1 and meta["total_frames"] == 50
    assert "observation.images.render" in meta["features"]


@pytest.mark.skipif(not metaworld_python().exists(), reason=".venv-metaworld is absent (make metaworld)")
def test_side_venv_matches_in_process():
    """Reacher in worker processes of another venv (.venv-metaworld: gymnasium 1.4 with MuJoCo
    3.3.0) through the side-venv base, against the same env in this process (MuJoCo 4): the same
    episodes to float32 rounding, the same auto-resets."""
    side = make_env("gym:Reacher-v5", 3, max_episode_steps=4, mapping={"python": str(metaworld_python())})
    try:
        here = make_env("gym:Reacher-v5", 3, max_episode_steps=4)
        a, b = _run(side, 9), _run(here, 9)
        here.close()
        for x, y in zip(a, b):
            assert (x is None) == (y is None)
            if x is not None:
                assert x.dtype == y.dtype and torch.allclose(x.float(), y.float(), atol=1e-5)
        assert len(side.workers) == 2 and all(w.shm is not None for w in side.workers)
        with pytest.raises(EnvError, match="not checkpointed"):
            side.state_dict()
    finally:
        side.close()
    assert all(w.proc is None for w in side.workers) or not side.workers
