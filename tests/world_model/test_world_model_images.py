"""The world model with cameras (sims/world_model/vision.py): a small image model trained here
on 16 PushCube demos at 32x32 beats copy-last on pixels at k = 4; the contract suite on its rgb
env; a pixel policy (the tiny flow VLA) collects and takes a PPO step in it; one-line errors
for a dataset without the configured camera and for mismatched rgb requests."""

from __future__ import annotations

import json
import shutil

import pytest
import test_sims_contract as contract
import torch

from sims.registry import make_env
from sims.vecenv import EnvError
from sims.world_model.checkpoint import load_world_model, save_world_model
from embodied.world_model.quality import kstep_errors
from sims.world_model.model import WorldModelConfig
from embodied.world_model.train import heldout_episodes, train_world_model

SMALL = dict(hidden=64, latent=32, channels=8, horizon_k=4, epochs=15, patience=100, batch_size=64, lr=3e-3)


@pytest.fixture(scope="module")
def image_model(build_once):
    """(checkpoint, the contract checkpoint without uncertainty truncation, dataset)."""
    from embodied.data.collect import collect_demos

    data = build_once("wm_pushcube_rgb_16", lambda p: collect_demos(
        "PushCube", 16, p, seed=0, obs_mode="rgb", image_size=32, cameras=("front",), noise=0.3))

    def build(path):
        torch.manual_seed(0)
        model, resets, _ = train_world_model(WorldModelConfig(task="PushCube", dataset=str(data), cameras=["front"],
                                                              **SMALL), log=lambda *a: None)
        save_world_model(path / "wm", model, resets)
        shutil.copytree(path / "wm", path / "wm_contract")
        meta = json.loads((path / "wm_contract" / "config.json").read_text())
        meta["config"]["disagreement_threshold"] = float("inf")
        (path / "wm_contract" / "config.json").write_text(json.dumps(meta))

    root = build_once("wm_pushcube_rgb_model", build)
    return root / "wm", root / "wm_contract", data


def test_image_model_beats_copy_last(image_model):
    model, resets = load_world_model(image_model[0], task="PushCube")
    assert model.cfg.image_size == [32, 32] and resets["img"].shape[1:] == (3, 32, 32)
    err = kstep_errors(model, heldout_episodes(model.cfg), 4)
    assert err["starts"] >= 20, err
    assert err["image_mse"] < 0.8 * err["copy_last_image_mse"], err
    assert err["image_psnr"] > err["copy_last_image_psnr"] and err["model_state"] < err["copy_last_state"], err


@pytest.fixture
def rgb_task(image_model, monkeypatch):
    """The contract tests build their envs through test_sims_contract.make_env: here with rgb."""
    monkeypatch.setattr(contract, "make_env", lambda task, n, **kw: make_env(task, n, obs_mode="rgb", **kw))
    return f"wm:{image_model[1]}"


def test_rgb_obs(image_model):
    env = make_env(f"wm:{image_model[1]}", 3, obs_mode="rgb", cameras=["front"], image_size=32)
    _, resets = load_world_model(image_model[1])
    assert env.spec.cameras == ("front",) and env.spec.image_size == (32, 32)
    obs, _ = env.reset(seed=[0, 1, 2])
    assert set(obs) == {"state", "privileged", "rgb_front", "instruction"}
    img = obs["rgb_front"]
    assert img.shape == (3, 32, 32, 3) and img.dtype == torch.uint8
    for row in img.permute(0, 3, 1, 2):  # a reset serves a real frame of the data
        assert (resets["img"] == row).flatten(1).all(1).any()
    r = env.step(torch.zeros(3, 4))
    assert r.obs["rgb_front"].shape == (3, 32, 32, 3) and r.obs["rgb_front"].float().std() > 5
    assert torch.equal(env.render([0, 2]), r.obs["rgb_front"][[0, 2]])
    state_only = make_env(f"wm:{image_model[1]}", 2)  # the same model can serve state only
    assert set(state_only.reset(seed=0)[0]) == {"state", "privileged", "instruction"}
    assert state_only.render([1]).shape == (1, 32, 32, 3)


def test_rgb_contract_truncation_and_auto_reset(rgb_task):
    contract.test_truncation_and_auto_reset(rgb_task)


def test_rgb_contract_seeding_and_determinism(rgb_task):
    contract.test_seeding(rgb_task)
    contract.test_determinism(rgb_task)


def test_rgb_contract_chunks(rgb_task):
    contract.test_chunk_step(rgb_task)
    contract.test_chunk_equals_steps(rgb_task)


def test_rgb_contract_state_dict_round_trip(rgb_task, tmp_path):
    contract.test_state_dict_round_trip(rgb_task, tmp_path)


def test_pixel_policy_trains_in_the_model(image_model):
    """The tiny flow VLA reads rgb_front from the model as from the simulator: a rollout and a
    PPO update with Flow-Noise, no change to the policy or the learner."""
    from embodied.config import PPOConfig
    from embodied.rl.learner import PPOLearner
    from embodied.rl.rollout import RolloutCollector
    from policies.vla.config import FlowVLAConfig
    from policies.vla.flow import FlowVLA

    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 32, "patch_size": 16}
    policy = FlowVLA(FlowVLAConfig(noise_method="flow_noise", vision=vision, num_steps=2, execute_steps=2))
    env = make_env(f"wm:{image_model[0]}", 4, obs_mode="rgb", cameras=["front"], image_size=32)
    col = RolloutCollector(env, policy, 3)
    col.reset(seed=0)
    traj = col.collect()
    assert traj.obs["rgb_front"].shape == (3, 4, 32, 32, 3) and traj.obs["rgb_front"].dtype == torch.uint8
    stats = PPOLearner(policy, PPOConfig(epochs=1, minibatches=2, lr=1e-5)).update(traj)
    assert abs(stats["ratio"] - 1.0) < 0.05


def _one_line(fn, *words):
    with pytest.raises(EnvError) as err:
        fn()
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_bad_input(image_model, tmp_path):
    path, _, data = image_model
    cfg = dict(task="PushCube", dataset=str(data), **{**SMALL, "epochs": 1})
    _one_line(lambda: train_world_model(WorldModelConfig(cameras=["front", "wrist"], **cfg)),
              "dataset", "'wrist'", "front")
    _one_line(lambda: train_world_model(WorldModelConfig(cameras="front", **cfg)), "world_model.cameras")
    _one_line(lambda: train_world_model(WorldModelConfig(cameras=["front"], init_from=str(path), **{**cfg, "hidden": 32})),
              "init_from", "hidden")
    _one_line(lambda: make_env(f"wm:{path}", 2, obs_mode="rgb", cameras=["wrist"]), "cameras", "wrist", "front")
    _one_line(lambda: make_env(f"wm:{path}", 2, obs_mode="rgb", image_size=64), "image_size", "32x32")
    env = make_env(f"wm:{path}", 2, obs_mode="rgb")
    _one_line(lambda: env.reset_to(torch.zeros(2, env.spec.privileged_dim)), "images", "rgb_front")
    sim = make_env("PushCube", 2, obs_mode="rgb", cameras=("front",), image_size=(32, 32))
    start, _ = sim.reset(seed=[3, 4])
    obs, _ = env.reset_to(start["privileged"], images=start)  # the simulator's starts, frames included
    assert torch.equal(obs["rgb_front"], start["rgb_front"])
