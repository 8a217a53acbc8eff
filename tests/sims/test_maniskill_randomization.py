"""Domain randomisation of ManiSkill tasks (sims/maniskill/randomization.py): a nominal block is
bit-identical to none, each knob changes what it should (latency shifts the response by k steps,
noise has its std, friction the slide of a cube, mass the push, gain the arm's tracking), draws
are seeded and reproducible (also across worker processes), and unsupported knobs are refused.

PushCube on physx_cpu; one env per test case, built in this process (about 2 s each)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sims.maniskill.randomization import SUPPORTED, MsRandomizer, resolve
from sims.mujoco.randomization import parse
from sims.registry import make_env
from sims.vecenv import EnvError
from test_sims_contract import _one_line_error

TASK = "ms:PushCube-v1"
CUBE = 13  # the cube's pose, then velocities, in PushCube's physics state (after the table's 13)
NOMINAL = {"friction": [1, 1], "mass": [1, 1], "actuator_gain": [1, 1], "latency_steps": [0, 0],
           "action_noise": [0, 0], "obs_noise": [0, 0]}


def env(block=None, n=2, num_threads=1, **kw):
    return make_env(TASK, n, num_threads=num_threads, randomization=block, **kw)


def fixed(**values):
    return {k: [v, v] for k, v in values.items()}


@pytest.fixture(scope="module")
def plain():
    e = env()
    yield e
    e.close()


def rollout(e, actions, seed=(3, 4)):
    """privileged obs [T + 1, B, P] and rewards [T, B] of actions [T, B, 7] from seeded resets."""
    obs, _ = e.reset(seed=list(seed))
    priv, rew = [obs["privileged"].numpy()], []
    for a in actions:
        r = e.step(torch.as_tensor(a, dtype=torch.float32))
        priv.append(r.obs["privileged"].numpy())
        rew.append(r.reward.numpy())
    return np.stack(priv), np.stack(rew)


def random_actions(steps, n=2, seed=0):
    a = np.random.default_rng(seed).uniform(-1, 1, (steps, n, 7))
    a[..., 6] = 1.0
    return a


def test_nominal_block_is_bit_identical_to_none(plain):
    e = env(NOMINAL, max_episode_steps=4)
    ref = env(max_episode_steps=4)  # an auto-reset inside the rollout
    acts = random_actions(7)
    got, want = rollout(e, acts), rollout(ref, acts)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    e.close()
    ref.close()


def test_latency_shifts_the_response_by_exactly_k_steps(plain):
    k = 2
    e = env(fixed(latency_steps=k))
    obs, _ = plain.reset(seed=[3, 4])
    hold = np.zeros((k, 2, 7))  # no arm motion; the gripper where the reset left it (open: +1)
    hold[..., 6] = np.clip(2 * (obs["state"][:, 7].double().numpy() + 0.01) / 0.05 - 1, -1, 1)
    assert np.allclose(hold[..., 6], 1.0)
    acts = random_actions(6)
    delayed = rollout(e, acts)
    shifted = rollout(plain, np.concatenate([hold, acts])[:6])
    np.testing.assert_array_equal(delayed[0], shifted[0])
    np.testing.assert_array_equal(delayed[1], shifted[1])
    assert not np.array_equal(delayed[0][3], rollout(plain, acts)[0][3])
    e.close()


def test_obs_noise_has_its_std_and_leaves_physics_alone(plain):
    e = env(fixed(obs_noise=0.01))
    acts = random_actions(4)
    got, ref = rollout(e, acts), rollout(plain, acts)
    err = (got[0] - ref[0]).astype(float)
    assert abs(err.std() - 0.01) < 0.001 and abs(err.mean()) < 0.001
    np.testing.assert_array_equal(got[1], ref[1])  # rewards come from the true states
    obs, _ = e.reset(seed=[3, 4])
    np.testing.assert_array_equal(obs["privileged"][:, :18], obs["state"])  # the same noise
    e.close()


def test_action_noise_has_its_std():
    r = MsRandomizer(parse(fixed(action_noise=0.2)), 256, 7, seed=0, set_physics=None)
    r.draw(np.arange(256))  # what a reset does
    applied = np.concatenate([r.action(np.zeros((256, 7)), None) for _ in range(4)])
    assert abs(applied.std() - 0.2) < 0.01 and abs(applied.mean()) < 0.01
    assert (r.action(np.ones((256, 7)), None) <= 1.0).all()  # clipped to the action box


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
def test_seeded_reproducible_and_the_same_in_worker_processes(plain):
    block = {"friction": [0.5, 1.5], "mass": [0.5, 2.0], "actuator_gain": [0.7, 1.3],
             "latency_steps": [0, 2], "action_noise": [0.0, 0.2], "obs_noise": [0.0, 0.01]}
    a, b = env(block, max_episode_steps=4), env(block, max_episode_steps=4, num_threads=2)
    acts = random_actions(6)
    ra, rb = rollout(a, acts), rollout(b, acts)  # b: two worker processes
    np.testing.assert_array_equal(ra[0], rb[0])
    np.testing.assert_array_equal(ra[1], rb[1])
    assert not np.array_equal(ra[0], rollout(plain, acts)[0])
    # A seed's draw is the same wherever the env sits in the batch: swapped seeds, swapped rows.
    a.reset(seed=[3, 4])
    drawn = {k: v.copy() for k, v in a._dr.params.items()}
    a.reset(seed=[4, 3])
    for k, v in a._dr.params.items():
        np.testing.assert_array_equal(v, drawn[k][::-1])
    assert len({float(drawn["mass"][0]), float(drawn["mass"][1])}) == 2
    a.close()
    b.close()


def _push(e, steps=16):
    """The cube's position after `steps` of the scripted push from seed 3 (both envs)."""
    from sims.registry import expert_for

    expert = expert_for(TASK)
    obs, _ = e.reset(seed=[3, 3])
    for _ in range(steps):
        obs = e.step(torch.from_numpy(expert(obs["privileged"].numpy())).float()).obs
    return obs["privileged"][:, 28:31].numpy()  # obj_pose


def test_mass_changes_the_push(plain):
    heavy = env(fixed(mass=100.0))
    x_heavy, x = _push(heavy)[:, 0], _push(plain)[:, 0]
    assert (x - x_heavy > 0.003).all(), (x, x_heavy)  # the arm pushes 6.4 kg more slowly
    heavy.close()


def _slide(e, v=0.5, steps=15):
    """Distance the cube slides on the table from v m/s along x, the arm holding still."""
    e.reset(seed=[3, 3])
    state = e.state_dict()
    x0 = state["physics"][:, CUBE].copy()
    state["physics"][:, CUBE + 7] = v  # linear velocity x
    e.load_state_dict(state)
    hold = torch.tensor([[0, 0, 0, 0, 0, 0, 1.0]] * 2)
    for _ in range(steps):
        e.step(hold)
    return e.state_dict()["physics"][:, CUBE] - x0


def test_friction_scales_the_slide(plain):
    rough = env(fixed(friction=2.0))
    d, d_rough = _slide(plain), _slide(rough)
    assert (np.abs(d - 0.5**2 / (2 * 0.3 * 9.81)) < 0.005).all(), d  # v^2 / (2 mu g), mu about 0.3
    assert (np.abs(d / d_rough - 2.0) < 0.25).all(), (d, d_rough)
    rough.close()


def test_actuator_gain_slows_the_arm(plain):
    soft = env(fixed(actuator_gain=0.2))
    acts = np.zeros((5, 2, 7))
    acts[..., 0], acts[..., 6] = 1.0, 1.0  # TCP along +x
    tcp_soft, tcp = (rollout(e, acts)[0][:, :, 18] for e in (soft, plain))
    assert ((tcp[-1] - tcp[0]) - (tcp_soft[-1] - tcp_soft[0]) > 0.01).all()
    soft.close()


def test_unsupported_and_bad_knobs_are_one_line_errors():
    _one_line_error(lambda: env({"camera_pos": [-0.01, 0.01]}), "env.randomization.camera_pos",
                    "not supported for ManiSkill", ", ".join(SUPPORTED))
    _one_line_error(lambda: env({"light_warmth": [0, 0.2]}), "light_warmth", "scene")
    _one_line_error(lambda: make_env(TASK, 1, num_threads=1, reality="twin_gap"),
                    "env.reality.twin_gap.", "not supported for ManiSkill")
    _one_line_error(lambda: env({"frcition": [0.5, 1]}), "unknown key 'frcition'")
    _one_line_error(lambda: env({"mass": [-1, 2]}), "env.randomization.mass", "outside physical sense")
    with pytest.raises(EnvError, match=r"^env.randomization.mass: .*physx_cpu.*latency_steps, action_noise"):
        resolve(fixed(mass=2.0), None, "physx_cuda")
    assert resolve(fixed(latency_steps=1), None, "physx_cuda").knobs == ("latency_steps",)
