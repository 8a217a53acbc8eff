"""State-space variants of the world model (sims/world_model/model.py): the "delta" unit of the
state error, the state latent, its consistent derived fields, and deeper members; trained here
on the 30 PushCube expert episodes of tests/world_model/test_world_model.py."""

from __future__ import annotations

import pytest
import torch

from sims.registry import make_env
from sims.world_model.checkpoint import load_world_model, save_world_model
from embodied.world_model.quality import kstep_errors
from sims.world_model.model import WorldModelConfig
from embodied.world_model.train import heldout_episodes, train_world_model
from test_world_model import SMALL, _one_line



@pytest.fixture(scope="module")
def data(build_once):
    from embodied.data.collect import collect_demos

    return build_once("wm_pushcube_30", lambda p: collect_demos("PushCube", 30, p, seed=0))


def test_delta_state_loss(data, tmp_path):
    """state_loss "delta" weighs each dimension's error by (state std / one-step change std)^2,
    capped and with mean 1: the cube's position, which moves a few mm a step, outweighs its
    velocity; the weights survive save/load, and continuing it as a "state" model is refused."""
    from sims.mujoco.tasks.base import CUBE_LAYOUT as L
    from sims.world_model.model import DELTA_WEIGHT_CAP

    cfg = WorldModelConfig(task="PushCube", dataset=str(data), state_loss="delta", **{**SMALL, "epochs": 2})
    model, resets, _ = train_world_model(cfg, log=lambda *a: None)
    w = model.loss_weight
    assert abs(float(w.mean()) - 1.0) < 1e-5 and float(w.max() / w.min()) <= DELTA_WEIGHT_CAP**2 + 1e-3
    assert float(w[L["cube"]][:2].min()) > float(w[L["cube_vel"]].max())
    save_world_model(tmp_path / "delta", model, resets)
    again, _ = load_world_model(tmp_path / "delta")
    assert torch.equal(again.loss_weight, w)
    _one_line(lambda: train_world_model(WorldModelConfig(task="PushCube", dataset=str(data),
                                                         init_from=str(tmp_path / "delta"), **SMALL)),
              "state_loss", "delta")
    _one_line(lambda: train_world_model(WorldModelConfig(task="PushCube", dataset=str(data), state_loss="pixels",
                                                         **SMALL)), "state_loss", "delta")


def test_state_latent_space(data, tmp_path):
    """latent_space "state": the latent is the normalised privileged vector and each member
    predicts its change in units of that change's std, so what never changes within an episode
    (the goal) stays exactly put; trained here, it beats copy-last on the state at k = 4 and
    serves the env."""
    from sims.mujoco.tasks.base import CUBE_LAYOUT as L
    from sims.world_model.rollout import encode_raw, mean_step

    cfg = WorldModelConfig(task="PushCube", dataset=str(data), latent_space="state", **SMALL)
    model, resets, _ = train_world_model(cfg, log=lambda *a: None)
    assert model.cfg.latent == model.cfg.privileged_dim and isinstance(model.decoder, torch.nn.Identity)
    err = kstep_errors(model, heldout_episodes(model.cfg), 4)
    assert err["starts"] > 20 and err["model_state"] < 0.9 * err["copy_last_state"], err
    x = resets["x"][:8]
    out = mean_step(model, encode_raw(model, x), torch.rand(8, 4) * 2 - 1)
    torch.testing.assert_close(out["x"][:, L["goal"]], x[:, L["goal"]])
    save_world_model(tmp_path / "state", model, resets)
    env = make_env(f"wm:{tmp_path / 'state'}", 4, rollout="members")
    env.reset(seed=0)
    assert env.step(torch.zeros(4, 4)).obs["privileged"].shape == (4, model.cfg.privileged_dim)
    _one_line(lambda: train_world_model(WorldModelConfig(task="PushCube", dataset=str(data), latent_space="pixels",
                                                         **SMALL)), "latent_space", "state")
    _one_line(lambda: train_world_model(WorldModelConfig(task="PushCube", dataset=str(data), latent_space="state",
                                                         cameras=["front"], **SMALL)), "latent_space", "learned")


def test_consistent_derived_fields(data, tmp_path):
    """consistent: after every model step the fields PushCube declares as differences (cube - tcp,
    goal - cube) equal the difference of the model's own cube, gripper and goal, and the cube's
    quaternion has norm 1, in both rollouts and after save/load; a plain state model's do not
    agree; the model still beats copy-last at k = 4; and the flag is refused where it means
    nothing. With member_layers 3 every member has three hidden layers."""
    from sims.mujoco.tasks.base import CUBE_LAYOUT as L

    def mismatch(x):  # [..., 32] -> the largest disagreement of a derived field (m)
        d1 = x[..., L["cube_minus_tcp"]] - (x[..., L["cube"]] - x[..., L["tcp"]])
        d2 = x[..., L["goal_minus_cube"]] - (x[..., L["goal"]] - x[..., L["cube"]])
        return float(torch.cat([d1, d2], -1).abs().max())

    def roll(path, rollout):  # 20 steps of random actions -> privileged vectors [20, 8, 32]
        env = make_env(f"wm:{path}", 8, rollout=rollout)
        env.reset(seed=0)
        gen = torch.Generator().manual_seed(0)
        return torch.stack([env.step(torch.rand(8, 4, generator=gen) * 2 - 1).obs["privileged"]
                            for _ in range(20)])

    for consistent in (True, False):
        cfg = WorldModelConfig(task="PushCube", dataset=str(data), latent_space="state", consistent=consistent,
                               member_layers=3, **SMALL)
        model, resets, _ = train_world_model(cfg, log=lambda *a: None)
        save_world_model(tmp_path / str(consistent), model, resets)
        xs = {r: roll(tmp_path / str(consistent), r) for r in ("mean", "members")}
        if consistent:
            assert all(mismatch(x) < 1e-5 for x in xs.values()), {r: mismatch(x) for r, x in xs.items()}
            q = xs["members"][..., L["cube_quat"]].norm(dim=-1)
            torch.testing.assert_close(q, torch.ones_like(q))
            err = kstep_errors(model, heldout_episodes(model.cfg), 4)
            assert err["model_state"] < 0.9 * err["copy_last_state"], err
            again, _ = load_world_model(tmp_path / "True")
            assert again.cfg.consistent and torch.equal(again.derived_rows, model.derived_rows)
        else:
            assert mismatch(xs["mean"]) > 1e-3  # nothing ties them: the test above can fail
        assert sum(isinstance(m, torch.nn.Linear) for m in model.members[0]) == 4
    _one_line(lambda: train_world_model(WorldModelConfig(task="PushCube", dataset=str(data), consistent=True,
                                                         **SMALL)), "consistent", "latent_space=state")
    _one_line(lambda: train_world_model(WorldModelConfig(task="PushCube", dataset=str(data), latent_space="state",
                                                         consistent="yes", **SMALL)), "consistent", "true")
    _one_line(lambda: train_world_model(WorldModelConfig(task="PushCube", dataset=str(data), latent_space="state",
                                                         member_layers=0, **SMALL)), "member_layers", ">= 1")
