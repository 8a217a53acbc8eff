"""The VecEnv contract for every MuJoCo task, for ManiSkill3 tasks ("ms:..."), for MetaWorld
("metaworld:...") and for gymnasium's MuJoCo arms ("gym:Reacher-v5", "gym:Pusher-v5"): shapes,
auto-reset, seeding, determinism, chunks; checkpoints and bad input for
MuJoCo and MetaWorld (ManiSkill's own bad-input and rgb tests are in test_maniskill.py,
MetaWorld's in test_metaworld.py). The MetaWorld cases skip, with the reason, without
.venv-metaworld (`make metaworld`; `make test` builds it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sims.metaworld.proc import metaworld_python
from sims.registry import expert_for, list_tasks, make_env
from sims.vecenv import EnvError

TASKS = list_tasks()
# ManiSkill3 through the same tests (CPU: physx_cpu with Mesa lavapipe, set up by `make maniskill`).
MS_TASKS = ["ms:PickCube-v1", "ms:PushCube-v1"]
# MetaWorld in its side venv: MT10 (env i runs task i: a mixed batch), and one task of it (equal
# seeds give equal states only within a task).
_needs_mw = pytest.mark.skipif(not metaworld_python().exists(), reason=".venv-metaworld is absent (make metaworld)")
MW = pytest.param("metaworld:MT10", marks=_needs_mw)
MW_ONE = pytest.param("metaworld:MT10/push-v3", marks=_needs_mw)
BOTH = TASKS + MS_TASKS
# ManiSkill's PushCube and its other tasks' shapes run in `make bench-scale` (each costs a ManiSkill
# scene, 5-15 s on 2 cores); the suite keeps PickCube through every contract test
_ms_scale = pytest.mark.scale
BOTH_SUITE = TASKS + [pytest.param(t, marks=_ms_scale) if t == "ms:PushCube-v1" else t for t in MS_TASKS]
# gymnasium's MuJoCo arms behind the contract (sims/gym, docs/gym.md): a single env run B times.
GYM = ["gym:Reacher-v5", "gym:Pusher-v5"]
ACTION_DIM = {"gym:Reacher-v5": 2, "gym:Pusher-v5": 7}


def _make(task: str, n: int, **kw):
    if task.startswith("ms:"):
        kw.setdefault("num_threads", 1)  # all envs in the test process: quick to start
    if task.startswith("metaworld:"):
        kw.setdefault("num_workers", 1)  # one worker process (importing MetaWorld costs a second or more)
    return make_env(task, n, **kw)


def _actions(n: int, steps: int, seed: int = 0, dim: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(n, dim, generator=g) * 2 - 1 for _ in range(steps)]


def _assert_obs_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if k == "instruction":
            assert a[k] == b[k]
        else:
            assert torch.equal(a[k], b[k]), k


def test_tasks_registered():
    assert set(TASKS) == {"Reach", "ReachPoint", "ReachColor", "PushCube", "PickCube", "PlaceCube", "Compose",
                          "ComposeHeldOut"}


@pytest.mark.parametrize("task", BOTH_SUITE + [pytest.param(t, marks=_ms_scale) for t in
                                               ("ms:StackCube-v1", "ms:PullCube-v1", "ms:PegInsertionSide-v1")]
                         + [MW] + GYM)
def test_state_obs_shapes(task):
    env = _make(task, 4)
    obs, info = env.reset(seed=0)
    spec = env.spec
    assert spec.action_dim == ACTION_DIM.get(task, 7 if task.startswith("ms:") else 4)
    assert spec.num_envs == 4 and spec.cameras == ()
    assert set(obs) == {"state", "privileged", "instruction"}
    assert obs["state"].shape == (4, spec.state_dim) and obs["state"].dtype == torch.float32
    assert obs["privileged"].shape == (4, spec.privileged_dim)
    assert obs["privileged"].dtype == torch.float32
    assert isinstance(obs["instruction"], list) and len(obs["instruction"]) == 4
    assert all(isinstance(s, str) and s for s in obs["instruction"])
    # privileged starts with the proprioceptive state
    assert torch.equal(obs["privileged"][:, : spec.state_dim], obs["state"])
    r = env.step(torch.zeros(4, spec.action_dim))
    assert r.reward.shape == (4,) and r.reward.dtype == torch.float32
    assert r.terminated.dtype == torch.bool and r.truncated.dtype == torch.bool
    assert r.info["success"].shape == (4,) and r.info["success"].dtype == torch.bool
    assert ((r.reward >= -1) & (r.reward <= 2)).all()
    env.close()


@pytest.mark.parametrize("task", TASKS)
def test_rgb_obs(task):
    env = make_env(task, 3, obs_mode="rgb", cameras=("front", "wrist"), image_size=(48, 64))
    obs, _ = env.reset(seed=[0, 1, 2])
    assert env.spec.cameras == ("front", "wrist") and env.spec.image_size == (48, 64)
    for cam in ("front", "wrist"):
        img = obs[f"rgb_{cam}"]
        assert img.shape == (3, 48, 64, 3) and img.dtype == torch.uint8
        assert img.float().std() > 5  # not a blank frame
    r = env.step(torch.zeros(3, 4))
    assert r.obs["rgb_front"].shape == (3, 48, 64, 3)
    frames = env.render([0, 2], camera="front")
    assert frames.shape == (2, 128, 128, 3) and frames.dtype == torch.uint8
    env.close()


def test_rgb_shows_per_env_colours():
    env = make_env("PushCube", 2, obs_mode="rgb", image_size=(64, 64))
    obs, _ = env.reset(seed=[5, 5])
    assert torch.equal(obs["rgb_front"][0], obs["rgb_front"][1])  # same seed, same picture
    for s in range(1, 50):  # a second seed with another colour pair
        obs, _ = env.reset(seed=[0, s])
        if obs["instruction"][0] != obs["instruction"][1]:
            break
    assert obs["instruction"][0] != obs["instruction"][1]
    assert not torch.equal(obs["rgb_front"][0], obs["rgb_front"][1])
    env.close()


@pytest.mark.parametrize("task", BOTH_SUITE + [MW] + GYM)
def test_truncation_and_auto_reset(task):
    env = _make(task, 4, max_episode_steps=3)
    obs, _ = env.reset(seed=0)
    hold = torch.zeros(4, env.spec.action_dim)
    if not task.startswith("gym:"):  # the gripper's last action (a gym arm holds still at zero torque)
        hold[:, -1] = -1.0 if task != "PushCube" else 1.0
    for t in range(3):
        prev = obs
        r = env.step(hold)
        obs = r.obs
        if t < 2:
            assert not r.done.any() and r.final_obs is None
    assert r.truncated.all() and not r.terminated.any() and not r.info["success"].any()
    assert r.final_obs is not None
    # final_obs continues the finished episode; obs starts a new one (with a new instruction list)
    tcp_final, tcp_prev = r.final_obs["state"][:, :3], prev["state"][:, :3]
    assert (tcp_final - tcp_prev).abs().max() < 0.01
    assert not torch.equal(r.final_obs["privileged"], r.obs["privileged"])
    assert len(r.final_obs["instruction"]) == 4
    # the new episode runs its full length again
    for _ in range(2):
        assert not env.step(hold).done.any()
    assert env.step(hold).truncated.all()


@pytest.mark.parametrize("task", BOTH_SUITE + [MW])
def test_success_terminates_and_final_obs(task):
    env = _make(task, 8)
    obs, _ = env.reset(seed=100)
    expert = expert_for(task)
    for _ in range(env.spec.max_episode_steps):
        r = env.step(torch.from_numpy(expert(obs["privileged"].numpy())))
        if r.done.any():
            break
        obs = r.obs
    done = r.done
    assert done.any() and r.final_obs is not None
    assert torch.equal(r.terminated[done], r.info["success"][done])
    assert not r.truncated[r.terminated].any()
    keep = ~done
    assert torch.equal(r.final_obs["privileged"][keep], r.obs["privileged"][keep])
    assert not torch.equal(r.final_obs["privileged"][done], r.obs["privileged"][done])


def test_failure_terminates():
    env = make_env("PushCube", 2)
    env.reset(seed=0)
    cube = env._h.cube_qpos
    env._qpos[1, cube:cube + 2] = (0.5, 0.0)  # beyond the table's edge
    r = env.step(torch.zeros(2, 4))
    assert r.terminated.tolist() == [False, True]
    assert r.info["fail"].tolist() == [False, True] and not r.info["success"].any()
    assert r.final_obs["privileged"][1, 9].item() == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("task", BOTH_SUITE + [MW_ONE] + GYM)
def test_seeding(task):
    a = _make(task, 4)
    obs_a, _ = a.reset(seed=[7, 3, 7, 9])
    pa = obs_a["privileged"]
    assert torch.equal(pa[0], pa[2]) and not torch.equal(pa[0], pa[1])
    assert obs_a["instruction"][0] == obs_a["instruction"][2]
    b = _make(task, 2)
    obs_b, _ = b.reset(seed=7)  # env 0 gets 7, env 1 gets 8
    assert torch.equal(obs_b["privileged"][0], pa[0])
    obs_c, _ = a.reset(seed=7, env_ids=torch.tensor([3, 1]))  # env 3 gets 7, env 1 gets 8
    assert torch.equal(obs_c["privileged"][3], pa[0])
    assert torch.equal(obs_c["privileged"][1], obs_b["privileged"][1])
    assert torch.equal(obs_c["privileged"][0], pa[0])  # untouched rows keep their state


@pytest.mark.parametrize("task", BOTH_SUITE + [MW] + GYM)
def test_determinism(task):
    envs = [_make(task, 6, max_episode_steps=4) for _ in range(2)]
    obs = [e.reset(seed=11)[0] for e in envs]
    _assert_obs_equal(*obs)
    for a in _actions(6, 10, dim=envs[0].spec.action_dim):  # spans auto-resets drawn from the batch stream
        r0, r1 = (e.step(a) for e in envs)
        _assert_obs_equal(r0.obs, r1.obs)
        assert torch.equal(r0.reward, r1.reward)


def test_thread_count_does_not_change_results():
    envs = [make_env("PickCube", 5, num_threads=n) for n in (1, 2)]
    obs = [e.reset(seed=8)[0] for e in envs]
    for a in _actions(5, 6, seed=4):
        obs = [e.step(a).obs for e in envs]
    _assert_obs_equal(*obs)


@pytest.mark.parametrize("task", ["PushCube", "PickCube", pytest.param("ms:PushCube-v1", marks=_ms_scale), MW] + GYM)
def test_chunk_step(task):
    env = _make(task, 3, max_episode_steps=3)
    A = env.spec.action_dim
    env.reset(seed=0)
    env.step(torch.zeros(3, A))
    env.reset(seed=5, env_ids=torch.tensor([0]))  # env 0 has 3 steps left, envs 1, 2 two
    r = env.chunk_step(torch.zeros(3, 4, A))
    assert r.valid.tolist() == [[True, True, True, False], [True, True, False, False],
                                [True, True, False, False]]
    assert r.truncated.tolist() == [[False, False, True, False], [False, True, False, False],
                                    [False, True, False, False]]
    assert (r.reward[~r.valid] == 0).all() and r.info["success"].shape == (3, 4)
    assert r.done.all() and r.final_obs is not None
    assert r.obs["privileged"].shape == (3, env.spec.privileged_dim)
    # the new episodes start fresh: 3 more steps each
    assert env.chunk_step(torch.zeros(3, 2, A)).valid.all()


@pytest.mark.parametrize("task", ["Reach", "PlaceCube", "ms:PickCube-v1", MW] + GYM)
def test_chunk_equals_steps(task):
    envs = [_make(task, 4) for _ in range(2)]
    for e in envs:
        e.reset(seed=3)
    acts = torch.stack(_actions(4, 3, seed=1, dim=envs[0].spec.action_dim), dim=1)  # [B, K, A]
    rc = envs[0].chunk_step(acts)
    rs = [envs[1].step(acts[:, k]) for k in range(3)]
    _assert_obs_equal(rc.obs, rs[-1].obs)
    assert torch.equal(rc.reward, torch.stack([r.reward for r in rs], dim=1))


def _through_storage(state: dict, tmp_path) -> dict:
    """Store like a trainer would: arrays to safetensors, the rest to JSON; load back."""
    from safetensors.numpy import load_file, save_file

    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    plain = {k: v for k, v in state.items() if k not in arrays}
    assert all(isinstance(v, (int, str, list)) for v in plain.values())
    save_file(arrays, str(tmp_path / "env.safetensors"))
    (tmp_path / "env.json").write_text(json.dumps(plain))
    return {**load_file(str(tmp_path / "env.safetensors")),
            **json.loads((tmp_path / "env.json").read_text())}


@pytest.mark.parametrize("task", TASKS + [MW] + GYM)
def test_state_dict_round_trip(task, tmp_path):
    a = _make(task, 5, max_episode_steps=4)
    a.reset(seed=21)
    acts = _actions(5, 14, seed=2, dim=a.spec.action_dim)
    for act in acts[:3]:
        a.step(act)
    state = _through_storage(a.state_dict(), tmp_path)
    b = _make(task, 5, max_episode_steps=4)
    b.reset(seed=999)
    b.load_state_dict(state)
    for act in acts[3:]:
        ra, rb = a.step(act), b.step(act)
        _assert_obs_equal(ra.obs, rb.obs)
        assert torch.equal(ra.reward, rb.reward) and torch.equal(ra.done, rb.done)


def _one_line_error(fn, *words):
    with pytest.raises(EnvError) as err:
        fn()
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_bad_input():
    env = make_env("PushCube", 2)
    _one_line_error(lambda: env.step(torch.zeros(2, 3)), "action", "shape")
    _one_line_error(lambda: env.step(torch.zeros(3, 4)), "action", "shape")
    nan = torch.zeros(2, 4)
    nan[1, 2] = float("nan")
    _one_line_error(lambda: env.step(nan), "NaN", "[1]")
    _one_line_error(lambda: env.chunk_step(torch.zeros(2, 4)), "action", "shape")
    _one_line_error(lambda: make_env("Stack", 2), "Stack", "PushCube", "Reach")
    _one_line_error(lambda: make_env("Reach", 2, obs_mode="depth"), "obs_mode", "rgb")
    _one_line_error(lambda: make_env("Reach", 2, reward_mode="shaped"), "reward_mode", "sparse")
    _one_line_error(lambda: env.reset(env_ids=torch.tensor([0, 2])), "env_ids")
    _one_line_error(lambda: env.reset(seed=[1, 2, 3]), "seed")
    # actions outside [-1, 1] are clipped, not rejected
    env.step(torch.full((2, 4), 5.0))


@pytest.mark.parametrize("task", ["PushCube", "PlaceCube"])
def test_reward_modes(task):
    """staged = progress P in [0, 1] (1 on success); dense = P(s') - P(s) + 1[success]."""
    envs = {m: make_env(task, 16, reward_mode=m) for m in ("dense", "staged", "sparse")}
    obs = {m: e.reset(seed=4)[0] for m, e in envs.items()}
    expert = expert_for(task)
    live = torch.ones(16, dtype=torch.bool)  # still in the first episode
    prev_staged = None
    for _ in range(envs["dense"].spec.max_episode_steps):
        act = torch.from_numpy(expert(obs["dense"]["privileged"].numpy()))
        r = {m: e.step(act) for m, e in envs.items()}
        st, de, sp = r["staged"], r["dense"], r["sparse"]
        succ = de.info["success"]
        assert ((st.reward >= 0) & (st.reward <= 1)).all()
        assert (st.reward[succ] == 1).all() and (de.reward[succ] > 0.5).all()
        assert torch.equal(sp.reward, succ.float())
        if prev_staged is not None:
            check = live & ~succ
            assert torch.allclose(de.reward[check], (st.reward - prev_staged)[check], atol=1e-6)
        prev_staged = st.reward
        live &= ~de.done
        obs = {m: x.obs for m, x in r.items()}
        if not live.any():
            break
    assert not live.any()


def test_sparse_reward():
    env = make_env("Reach", 4, reward_mode="sparse")
    obs, _ = env.reset(seed=0)
    expert = expert_for("Reach")
    for _ in range(20):
        r = env.step(torch.from_numpy(expert(obs["privileged"].numpy())))
        assert torch.equal(r.reward, r.info["success"].float())
        obs = r.obs


def test_unknown_task_suggests_the_closest_and_names_every_family():
    with pytest.raises(EnvError) as e:
        make_env("Pushcube", 2)
    msg = str(e.value)
    assert "did you mean 'PushCube'?" in msg and "\n" not in msg
    assert all(f in msg for f in ("ms:", "libero:", "metaworld:", "multi:", "wm:", "gym:"))
    with pytest.raises(EnvError, match="unknown task 'FlyToMoon'; allowed") as e:
        make_env("FlyToMoon", 2)
    assert "did you mean" not in str(e.value)
