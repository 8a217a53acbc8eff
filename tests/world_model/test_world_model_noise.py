"""model_noise (sims/world_model/env.py): Gaussian noise of a multiple of the checkpoint's
one-step error std added to every step's next latent, from the env's seeded stream. The
contract suite with it on, the noise's size against residual_std, and one-line errors; the
learned noise head (embodied/world_model/noise.py): its likelihood, its fit, the noise it sets."""

from __future__ import annotations

import json
import shutil

import pytest
import test_sims_contract as contract
import torch

from sims.registry import make_env
from sims.world_model.checkpoint import load_world_model, save_world_model
from sims.world_model.env import WorldModelVecEnv
from sims.world_model.model import NOISE_FACTOR_RANGE, WorldModelConfig
from embodied.world_model.noise import gaussian_nll, one_step_errors
from sims.world_model.rollout import encode_raw
from embodied.world_model.train import heldout_episodes, train_world_model
from test_world_model import SMALL, _one_line, trained  # noqa: F401  (trained: the fixture)


@pytest.fixture(scope="module")
def state_model(trained, tmp_path_factory):  # noqa: F811
    """A state-latent model (the latent is the normalised privileged vector) on the same data."""
    path = tmp_path_factory.mktemp("noise") / "state"
    torch.manual_seed(0)
    model, resets, _ = train_world_model(WorldModelConfig(task="PushCube", dataset=str(trained[2]),
                                                          latent_space="state", **SMALL), log=lambda *a: None)
    save_world_model(path, model, resets)
    return path


@pytest.mark.parametrize("rollout", ["mean", "members"])
@pytest.mark.parametrize("check", ["seeding", "determinism", "chunk_equals_steps", "state_dict_round_trip"])
def test_contract_with_model_noise(trained, check, rollout, monkeypatch, tmp_path):  # noqa: F811
    make = contract.make_env
    monkeypatch.setattr(contract, "make_env", lambda t, n, **kw: make(t, n, rollout=rollout, model_noise=1.0, **kw))
    fn = getattr(contract, f"test_{check}")
    task = f"wm:{trained[1]}"
    fn(task, tmp_path) if check == "state_dict_round_trip" else fn(task)


def test_residual_std_is_the_held_out_one_step_error(trained):  # noqa: F811
    """residual_std, re-derived: the members' mean step from each held-out state under its own
    action, minus the next state's latent, std per dimension."""
    model, _ = load_world_model(trained[0])
    res = []
    with torch.no_grad():
        for ep in heldout_episodes(model.cfg):
            z = encode_raw(model, ep.x[:-1])
            step = torch.stack([m(torch.cat([z, ep.a[:-1]], -1)) + z for m in model.members]).mean(0)
            res.append(step - encode_raw(model, ep.x[1:]))
    want = torch.cat(res).std(dim=0)
    torch.testing.assert_close(torch.tensor(model.cfg.residual_std), want, rtol=1e-4, atol=1e-6)
    assert (want > 0).all()


@pytest.mark.parametrize("rollout", ["mean", "members"])
def test_noise_has_the_calibrated_size(state_model, rollout):
    """From one state under one action, 512 rows (of one member, with rollout "members") spread
    by model_noise x residual_std per dimension of the latent (the normalised state); with
    model_noise 0 they do not spread."""
    model, resets = load_world_model(state_model)
    std = torch.tensor(model.cfg.residual_std)
    N = 512 if rollout == "mean" else 512 * model.cfg.members
    x0 = resets["x"][:1].expand(N, -1)
    a = torch.tensor([[0.5, 0.0, -0.2, 1.0]]).expand(N, 4)
    for scale in (0.0, 0.5, 2.0):
        env = WorldModelVecEnv(str(state_model), N, seed=0, rollout=rollout, model_noise=scale)
        env.reset_to(x0)
        res = env.step(a)
        x = res.obs["privileged"].clone()
        if res.final_obs is not None:  # a row that ended (its head's call) serves the reset frame
            x[res.done] = res.final_obs["privileged"][res.done]
        z = model.normalize(x)[:: N // 512]  # rows 0, M, 2M, ...: member 0's with rollout "members"
        moving = std > 1e-3  # the goal never moves: its residual is 0
        spread = z.std(dim=0)
        if scale == 0.0:
            assert float(spread.max()) < 1e-5
        else:
            ratio = spread[moving] / (scale * std[moving])
            assert float(ratio.min()) > 0.85 and float(ratio.max()) < 1.15, ratio
            assert float(spread[~moving].max()) < 1e-5


def test_bad_input(trained, tmp_path):  # noqa: F811
    path = trained[0]
    _one_line(lambda: make_env(f"wm:{path}", 2, model_noise=-1.0), "model_noise", ">= 0")
    _one_line(lambda: make_env(f"wm:{path}", 2, model_noise="big"), "model_noise", ">= 0")
    _one_line(lambda: make_env("PushCube", 2, model_noise=1.0), "env.model_noise", "allowed for PushCube: 0")
    old = tmp_path / "old"
    shutil.copytree(path, old)
    meta = json.loads((old / "config.json").read_text())
    del meta["config"]["residual_std"]  # a checkpoint written before residual_std existed
    (old / "config.json").write_text(json.dumps(meta))
    _one_line(lambda: make_env(f"wm:{old}", 2, model_noise=1.0), "model_noise", "residual_std", "allowed here: 0")
    make_env(f"wm:{old}", 2).close()  # without noise it still serves


# -- the noise head (embodied/world_model/noise.py) ---------------------------------------------------


@pytest.fixture(scope="module")
def head_model(state_model, trained, tmp_path_factory):  # noqa: F811
    """The state model trained again with noise_head=true: (checkpoint, training summary)."""
    path = tmp_path_factory.mktemp("noise_head") / "head"
    model, resets, summary = train_world_model(WorldModelConfig(task="PushCube", dataset=str(trained[2]),
                                                                latent_space="state", noise_head=True, **SMALL),
                                               log=lambda *a: None)
    save_world_model(path, model, resets)
    return path, summary


def test_gaussian_nll_is_the_normal_log_likelihood():
    g = torch.Generator().manual_seed(0)
    err, std = torch.randn(50, 6, generator=g), torch.rand(50, 6, generator=g) + 0.1
    moving = torch.tensor([True, True, False, True, False, True])
    want = -torch.distributions.Normal(torch.zeros(()), std[:, moving]).log_prob(err[:, moving]).mean()
    torch.testing.assert_close(gaussian_nll(err, std, moving), want)


def test_noise_head_trains_with_the_model_and_fits_onto_a_trained_one(state_model, head_model, tmp_path, capsys):
    """Training with noise_head=true leaves the dynamics and heads as without it, and fits the
    head that `embodied world-model fit-noise` fits onto the model trained without it. On the
    held-out half it did not fit, its NLL is below residual_std's, and its std scales
    residual_std by at most NOISE_FACTOR_RANGE either way."""
    from embodied.cli import main

    assert main(["world-model", "fit-noise", str(state_model), "--out", str(tmp_path / "fit")]) == 0
    fit = json.loads(capsys.readouterr().out)["noise_head"]
    trained_with, _ = load_world_model(head_model[0])
    fitted, _ = load_world_model(tmp_path / "fit")
    plain, _ = load_world_model(state_model)
    for k, v in trained_with.state_dict().items():
        torch.testing.assert_close(fitted.state_dict()[k], v, rtol=0, atol=0)
        if not k.startswith("noise_net."):
            torch.testing.assert_close(plain.state_dict()[k], v, rtol=0, atol=0)
    assert trained_with.cfg.residual_std == plain.cfg.residual_std
    summary = head_model[1]["noise_head"]
    assert fit == summary and summary["nll"] < summary["nll_residual_std"] - 0.05, summary
    z, a, _ = one_step_errors(fitted, heldout_episodes(fitted.cfg))
    with torch.no_grad():
        factor = fitted.noise_std(z, a) / torch.tensor(fitted.cfg.residual_std).clamp_min(1e-12)
    moving = torch.tensor(fitted.cfg.residual_std) > 0
    assert float(factor[:, moving].max()) <= NOISE_FACTOR_RANGE + 1e-4
    assert float(factor[:, moving].min()) >= 1 / NOISE_FACTOR_RANGE - 1e-6
    assert float(factor[:, moving].std()) > 0.05  # it depends on the state and action


@pytest.mark.parametrize("rollout", ["mean", "members"])
def test_noise_head_sets_the_noise_size(head_model, rollout):
    """From one state under one action, rows spread by model_noise x the head's std there."""
    path = head_model[0]
    model, resets = load_world_model(path)
    N = 512 if rollout == "mean" else 512 * model.cfg.members
    x0 = resets["x"][:1].expand(N, -1)
    a = torch.tensor([[0.5, 0.0, -0.2, 1.0]]).expand(N, 4)
    with torch.no_grad():
        std = model.noise_std(encode_raw(model, x0[:1]), a[:1])[0]
    assert not torch.allclose(std, torch.tensor(model.cfg.residual_std))
    env = WorldModelVecEnv(str(path), N, seed=0, rollout=rollout, model_noise=2.0)
    env.reset_to(x0)
    res = env.step(a)
    x = res.obs["privileged"].clone()
    if res.final_obs is not None:
        x[res.done] = res.final_obs["privileged"][res.done]
    spread = model.normalize(x)[:: N // 512].std(dim=0)
    moving = std > 1e-3
    ratio = spread[moving] / (2.0 * std[moving])
    assert float(ratio.min()) > 0.85 and float(ratio.max()) < 1.15, ratio


def test_noise_head_bad_input(trained, state_model, tmp_path, capsys):  # noqa: F811
    from embodied.cli import main

    _one_line(lambda: train_world_model(WorldModelConfig(task="PushCube", dataset=str(trained[2]),
                                                         noise_head="yes", **SMALL)), "world_model.noise_head")

    def refused(args, *words):
        assert main(["world-model", "fit-noise", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and all(w in err for w in words), err

    refused([str(state_model), "--out", str(state_model)], "--out", "allowed: another folder")
    old = tmp_path / "old"
    shutil.copytree(trained[0], old)
    meta = json.loads((old / "config.json").read_text())
    del meta["config"]["residual_std"]
    (old / "config.json").write_text(json.dumps(meta))
    refused([str(old), "--out", str(tmp_path / "new")], "checkpoint", "residual_std")
    assert not (tmp_path / "new").exists()
