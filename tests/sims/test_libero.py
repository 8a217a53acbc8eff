"""LIBERO behind the VecEnv contract (sims/libero): shapes, auto-reset, seeded resets, the soft
reset against LIBERO's hard reset, exact resume, the dense reward's stages along the scripted
expert, bad input, a dead worker started again once.
The scripted expert runs in tests/eval/test_libero_protocol.py, through the evaluation protocol.

Needs .venv-libero (`make libero`; `make test` builds it): without it every test that starts a
worker is skipped with that reason. State-only, one task, few steps; one rendered
smoke test (marked slow)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from sims.libero.env import SIM_START
from sims.libero.expert import PickPlace
from sims.libero.proc import libero_python, start_worker
from sims.libero.tasks import SUITES, parse_name
from sims.registry import make_env
from sims.vecenv import EnvError

needs_libero = pytest.mark.skipif(not libero_python().exists(),
                                  reason=".venv-libero is absent (build it with `make libero`)")
TASK = "libero:libero_spatial/0"
STEPS = 6  # a short time limit, so that truncation and auto-reset come quickly


@pytest.fixture(scope="module")
def env():
    if not libero_python().exists():
        pytest.skip(".venv-libero is absent (build it with `make libero`)")
    e = make_env(TASK, 2, max_episode_steps=STEPS, seed=0, reward_mode="dense")
    yield e
    e.close()


def _actions(n: int, steps: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(n, 7, generator=g) * 2 - 1 for _ in range(steps)]


@needs_libero
def test_shapes_and_dtypes(env):
    obs, _ = env.reset(seed=[0, 1])
    s = env.spec
    assert (s.action_dim, s.state_dim, s.num_envs, s.cameras, s.control_hz) == (7, 8, 2, (), 20.0)
    assert set(obs) == {"state", "privileged", "instruction"}
    assert obs["state"].shape == (2, 8) and obs["state"].dtype == torch.float32
    assert obs["privileged"].shape == (2, s.privileged_dim) and obs["privileged"].dtype == torch.float32
    assert torch.equal(obs["privileged"][:, :8], obs["state"])
    assert obs["instruction"] == ["pick up the black bowl between the plate and the ramekin and place it on the plate"] * 2
    # eef above the table, pointing down (axis-angle of norm about pi: the eval scripts' formula,
    # 2 acos(w), is not folded into [0, pi]), gripper open after the settle steps
    assert (obs["state"][:, 2] > 0.9).all() and ((obs["state"][:, 3:6].norm(dim=1) - np.pi).abs() < 0.2).all()
    assert (obs["state"][:, 6] > 0.03).all() and (obs["state"][:, 7] < -0.03).all()
    # the goal's objects: the bowl, then the plate, both on the table (z about 0.9 m)
    objs = obs["privileged"][:, 8:SIM_START].reshape(2, 2, 3)
    assert ((objs[..., 2] - 0.9).abs() < 0.02).all() and ((objs[:, 0] - objs[:, 1]).norm(dim=1) > 0.05).all()
    r = env.step(torch.zeros(2, 7))
    assert r.reward.shape == (2,) and r.reward.dtype == torch.float32
    assert r.terminated.dtype == torch.bool and r.truncated.dtype == torch.bool
    assert r.info["success"].shape == (2,) and not r.info["success"].any()


@needs_libero
def test_seeded_reset_is_bit_identical(env):
    acts = _actions(2, 3)
    obs_a, _ = env.reset(seed=[5, 7])
    run_a = [env.step(a).obs["privileged"] for a in acts]
    obs_b, _ = env.reset(seed=[7, 5])  # equal seeds, swapped envs
    run_b = [env.step(a.flip(0)).obs["privileged"] for a in acts]
    assert torch.equal(obs_a["privileged"], obs_b["privileged"].flip(0))
    for x, y in zip(run_a, run_b):
        assert torch.equal(x, y.flip(0))
    obs_c, _ = env.reset(seed=[6, 6])  # another official init state: another layout
    assert not torch.equal(obs_c["privileged"][0], obs_a["privileged"][0])


@needs_libero
def test_auto_reset_truncation_and_final_obs(env):
    env.reset(seed=[0, 1])
    for k, a in enumerate(_actions(2, STEPS)):
        r = env.step(a)
        if k < STEPS - 1:
            assert not r.done.any() and r.final_obs is None
    assert r.truncated.all() and not r.terminated.any()
    assert r.final_obs is not None and r.final_obs["privileged"].shape == r.obs["privileged"].shape
    # the new episode starts at the settled init state (time 0 + settle), the finished one later
    t_final, t_new = r.final_obs["privileged"][:, SIM_START], r.obs["privileged"][:, SIM_START]
    assert (t_final > t_new).all()
    # a chunk longer than what is left: the env stops at the limit, skips the rest, resets
    c = env.chunk_step(torch.zeros(2, STEPS + 3, 7))
    assert c.valid[:, :STEPS].all() and not c.valid[:, STEPS:].any()
    assert c.truncated[:, STEPS - 1].all() and c.final_obs is not None


@needs_libero
def test_resume_is_bit_identical(env):
    env.reset(seed=[3, 4])
    for a in _actions(2, 2, seed=1):
        env.step(a)
    state = env.state_dict()
    acts = _actions(2, 3, seed=2)
    run_a = [(r.obs["privileged"], r.reward) for r in map(env.step, acts)]
    env.load_state_dict(state)
    run_b = [(r.obs["privileged"], r.reward) for r in map(env.step, acts)]
    for (x, rx), (y, ry) in zip(run_a, run_b):
        assert torch.equal(x, y) and torch.equal(rx, ry)  # the dense reward's potential is restored too


@needs_libero
def test_dense_reward_stages_along_the_expert(env):
    """The scripted expert, run on env 0's worker: the potential's terms come in the expert's
    order (reach the rim, grasp, lift, carry over the plate) and the dense rewards sum to the
    potential's change (shaping by a potential difference)."""
    wk, expert = env.workers[0], PickPlace()
    wk.call({"op": "reset", "envs": [[0, 0]], "render": False})
    phi0 = wk.call({"op": "potential"})["last"]
    first: dict[str, int] = {}
    total = 0.0
    for t in range(120):
        priv = wk.obs[:, :SIM_START].copy()
        rep = wk.call({"op": "step", "actions": np.asarray(expert(priv), np.float64)[:, None], "render": False,
                       "dense": True})
        total += float(rep["reward"][0, :rep["n"][0]].sum())
        pot = wk.call({"op": "potential"})
        terms = pot["terms"]
        for name, hit in (("reach", terms["reach"] > 0.8), ("grasp", terms["grasp"] == 1.0),
                          ("lift", terms["lift"] == 1.0 and terms["grasp"] == 1.0),
                          ("over", terms["over"] > 0.9 and terms["lift"] == 1.0)):
            if hit:
                first.setdefault(name, t)
        if "over" in first:
            break
    assert list(first) == ["reach", "grasp", "lift", "over"], first
    assert first["reach"] < first["grasp"] <= first["lift"] < first["over"], first
    assert pot["phi"] > 0.9 and abs(total - (pot["last"] - phi0)) < 1e-9 and not rep["success"].any()
    env.reset(seed=[0, 1])


@needs_libero
def test_soft_reset_matches_hard_reset():
    """The soft reset (gripper action zeroed, set_init_state) equals LIBERO's default hard reset,
    bit for bit, after an episode that closed the gripper."""
    wk = start_worker("check", "libero_spatial", "1", 32, 32, [], 10)
    try:
        wk.wait_ready(600)
        close = [[0.3, 0.0, -0.3, 0.0, 0.0, 0.0, 1.0]] * 4  # moves and closes the gripper
        acts = (np.random.default_rng(0).random((15, 7)) * 2 - 1).tolist()
        runs = []
        for hard in (True, False):
            wk.call({"op": "step", "actions": np.asarray([close], np.float64)})
            wk.call({"op": "reset", "envs": [[0, 2]], "hard": hard})
            start = wk.obs[0, SIM_START:].copy()
            wk.call({"op": "step", "actions": np.asarray([acts], np.float64)})
            runs.append((start, wk.obs[0, SIM_START:].copy()))
        assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])
    finally:
        wk.close()


def test_bad_input_names_the_field():
    with pytest.raises(EnvError, match="unknown LIBERO suite 'libero_nope'.*allowed: libero_spatial"):
        parse_name("libero:libero_nope/0")
    with pytest.raises(EnvError, match="index 10 out of range for libero_spatial"):
        make_env("libero:libero_spatial/10", 1)
    assert parse_name("libero:libero_90") == ("libero_90", None) and SUITES["libero_10"] == (10, 520)
    with pytest.raises(EnvError, match="obs_mode"):
        make_env(TASK, 1, obs_mode="depth")
    with pytest.raises(EnvError, match="reward_mode: unknown value 'staged'; allowed: sparse, dense"):
        make_env(TASK, 1, reward_mode="staged")
    with pytest.raises(EnvError, match="cameras: unknown camera 'front'"):
        make_env(TASK, 1, obs_mode="rgb", cameras=("front",))
    with pytest.raises(EnvError, match="env.randomization"):
        make_env(TASK, 1, randomization={"x": 1})


def test_missing_venv_is_one_line(monkeypatch):
    monkeypatch.setenv("LIBERO_PYTHON", "/nonexistent/python")
    with pytest.raises(EnvError, match=r"no LIBERO interpreter .*make libero") as e:
        make_env(TASK, 1)
    assert "\n" not in str(e.value)


@needs_libero
def test_worker_that_fails_to_start_is_named():
    with pytest.raises(EnvError, match=r"libero_spatial/no_such_task \(env 0\).*unknown task 'no_such_task'") as e:
        make_env("libero:libero_spatial/no_such_task", 1)
    assert "\n" not in str(e.value)


@needs_libero
@pytest.mark.slow
def test_rendered_smoke():
    """Two cameras at 64x64, upright: the agentview's bright table fills the bottom rows, the
    robot and the dark floor the top (a 180-degree-rotated frame has it the other way)."""
    with make_env(TASK, 1, obs_mode="rgb", image_size=(64, 64)) as e:
        obs, _ = e.reset(seed=0)
        for cam in ("rgb_agentview", "rgb_wrist"):
            assert obs[cam].shape == (1, 64, 64, 3) and obs[cam].dtype == torch.uint8
            assert obs[cam].float().std() > 10
        img = obs["rgb_agentview"][0].float()
        assert img[-20:].mean() > img[:20].mean() + 20
        r = e.chunk_step(torch.zeros(1, 3, 7))
        assert r.obs["rgb_wrist"].shape == (1, 64, 64, 3)
        assert torch.equal(e.render([0], camera="agentview"), r.obs["rgb_agentview"])


@needs_libero
def test_dead_worker_is_restarted_once_then_one_line_and_close_cleans_up(env):
    """Runs last in this module: it kills a worker of the shared env, twice."""
    env.reset(seed=[0, 1])
    before = env.step(torch.zeros(2, 7)).obs
    shm = [wk.shm.name for wk in env.workers]
    procs = [wk.proc for wk in env.workers]
    procs[1].kill()
    procs[1].wait()
    with pytest.warns(RuntimeWarning, match=r"worker libero_spatial/0 \(env 1\) died \(exit -9\).*again \(once\)"):
        r = env.step(torch.zeros(2, 7))
    # env 1's episode ended with its worker: truncated, its last observation as the final one; a
    # new worker runs a new episode; env 0 went on
    assert r.truncated.tolist() == [False, True] and not r.terminated.any() and env.restarts == [0, 1]
    assert torch.equal(r.final_obs["privileged"][1], before["privileged"][1])
    assert r.obs["privileged"][1, SIM_START] < before["privileged"][1, SIM_START]
    assert env.workers[1].proc is not procs[1] and env.workers[1].proc.poll() is None
    r = env.step(torch.zeros(2, 7))
    assert not r.done.any()
    env.workers[1].proc.kill()
    env.workers[1].proc.wait()
    with pytest.raises(EnvError, match=r"worker libero_spatial/0 \(env 1\) died .*started again once already") as e:
        env.step(torch.zeros(2, 7))
    assert "\n" not in str(e.value)
    procs.append(env.workers[1].proc)
    shm.append(env.workers[1].shm.name)
    env.close()
    assert all(p.poll() is not None for p in procs)
    assert not any(os.path.exists(f"/dev/shm/{n.lstrip('/')}") for n in shm)
