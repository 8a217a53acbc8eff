"""Policy contract: act/evaluate consistency, first-epoch ratio, persistence."""

import pytest
import torch

from embodied.config import PolicyConfig
from policies.base import Policy, PolicyLoadError
from policies.registry import build_policy
from sims.vecenv import EnvSpec

SPEC = EnvSpec(task="T", num_envs=8, action_dim=4, state_dim=7, privileged_dim=20, max_episode_steps=50,
               control_hz=20.0, cameras=("front",), image_size=(64, 64))


def make_obs(b=8):
    return {"state": torch.randn(b, 7), "privileged": torch.randn(b, 20),
            "rgb_front": torch.randint(0, 255, (b, 64, 64, 3), dtype=torch.uint8),
            "instruction": ["push the red cube"] * b}


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_act_evaluate_ratio_is_one(name):
    policy = build_policy(PolicyConfig(name=name), SPEC)
    obs = make_obs()
    policy.update_normalizer(obs)
    out = policy.act(obs)
    assert out.actions.shape == (8, 1, 4) and out.log_prob.shape == (8,) and out.value.shape == (8,)
    ev = policy.evaluate(obs, out.replay)
    ratio = torch.exp(ev.log_prob - out.log_prob)
    torch.testing.assert_close(ratio, torch.ones(8), atol=1e-5, rtol=0)
    torch.testing.assert_close(ev.value, out.value)
    assert ev.entropy.shape == (8,)


def test_gaussian_log_prob_matches_torch_distribution():
    policy = build_policy(PolicyConfig(name="mlp"), SPEC)
    obs = make_obs()
    out = policy.act(obs)
    mean = policy.actor_mean(obs)
    dist = torch.distributions.Normal(mean, torch.exp(policy.log_std))
    torch.testing.assert_close(out.log_prob, dist.log_prob(out.replay["action"]).sum(-1))
    torch.testing.assert_close(policy.evaluate(obs, out.replay).entropy, dist.entropy().sum(-1))


def test_deterministic_act_is_mean():
    policy = build_policy(PolicyConfig(name="mlp"), SPEC)
    obs = make_obs()
    a1 = policy.act(obs, deterministic=True).actions
    a2 = policy.act(obs, deterministic=True).actions
    assert torch.equal(a1, a2)
    torch.testing.assert_close(a1[:, 0], policy.actor_mean(obs))


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_save_load_bit_identical(tmp_path, name):
    policy = build_policy(PolicyConfig(name=name), SPEC)
    obs = make_obs()
    policy.update_normalizer(obs)
    policy.save_pretrained(tmp_path / "p")
    loaded = Policy.from_pretrained(tmp_path / "p")
    assert type(loaded) is type(policy)
    a = policy.act(obs, deterministic=True)
    b = loaded.act(obs, deterministic=True)
    assert torch.equal(a.actions, b.actions) and torch.equal(a.value, b.value)


def test_load_mismatched_weights_is_clear(tmp_path):
    build_policy(PolicyConfig(name="mlp", hidden_sizes=[32]), SPEC).save_pretrained(tmp_path / "p")
    import json
    cfg = json.loads((tmp_path / "p" / "config.json").read_text())
    cfg["config"]["hidden_sizes"] = [64]
    (tmp_path / "p" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(PolicyLoadError, match="shape mismatch") as e:
        Policy.from_pretrained(tmp_path / "p")
    assert "\n" not in str(e.value)
    with pytest.raises(PolicyLoadError, match="not a policy directory"):
        Policy.from_pretrained(tmp_path / "missing")


def test_sft_loss_decreases():
    policy = build_policy(PolicyConfig(name="mlp"), SPEC)
    obs = make_obs(64)
    target = torch.tanh(obs["privileged"][:, :4]).unsqueeze(1)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    first = None
    for _ in range(200):
        loss = policy.sft_loss(obs, target)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first - 1.0
