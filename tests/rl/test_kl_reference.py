"""ppo.kl_ref_coef: the KL penalty to the policy the run started from (embodied/rl/learner.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from embodied.config import ConfigError, PPOConfig, load_config
from embodied.rl.algorithms import kl_to_reference
from embodied.rl.learner import PPOLearner
from embodied.rl.rollout import RolloutCollector
from policies.vla.config import FlowVLAConfig
from policies.vla.flow import FlowVLA
from sims.registry import make_env

TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
               "num_attention_heads": 2, "image_size": 32, "patch_size": 16}


def test_k3_estimates_the_kl_of_two_gaussians():
    torch.manual_seed(0)
    pi, ref = torch.distributions.Normal(0.0, 1.0), torch.distributions.Normal(0.5, 1.2)
    x = pi.sample((400_000,))
    exact = torch.distributions.kl_divergence(pi, ref)  # KL(pi || ref), 0.0559
    est = kl_to_reference(pi.log_prob(x), ref.log_prob(x))
    assert abs(float(est) - float(exact)) < 0.003, (float(est), float(exact))
    lp = pi.log_prob(x[:100]).clone().requires_grad_(True)
    same = kl_to_reference(lp, lp.detach())
    same.backward()
    assert float(same.detach()) == 0.0 and torch.equal(lp.grad, torch.zeros_like(lp))
    mask = torch.zeros(100, dtype=torch.bool)
    mask[:10] = True
    part = kl_to_reference(pi.log_prob(x[:100]), ref.log_prob(x[:100]), mask)
    assert torch.isclose(part, kl_to_reference(pi.log_prob(x[:10]), ref.log_prob(x[:10])))


def _flow() -> FlowVLA:
    torch.manual_seed(0)
    return FlowVLA(FlowVLAConfig(noise_method="flow_noise", vision=dict(TINY_VISION), num_steps=4,
                                 execute_steps=2, noise_std_min=0.2, noise_std_max=0.5))


def _kl_from(policy, start, traj) -> float:
    """k3 of the current policy against `start` on the trajectory's sampled chains (action level)."""
    obs = {k: v.flatten(0, 1) for k, v in traj.obs.items()}
    obs["instruction"] = [s for step in traj.instructions for s in step]
    replay = {k: v.flatten(0, 1) for k, v in traj.replay.items()}
    with torch.no_grad():
        new, old = policy.evaluate(obs, replay), start.evaluate(obs, replay)
    return float(kl_to_reference(new.log_prob_parts.sum(-1), old.log_prob_parts.sum(-1)))


@pytest.mark.parametrize("level", ["chunk", "action"])
def test_the_penalty_keeps_the_policy_near_its_start_and_the_reference_frozen(level):
    env = make_env("PushCube", 8, obs_mode="rgb", image_size=32)
    col = RolloutCollector(env, _flow(), 4)
    col.reset(seed=0)
    traj = col.collect()
    env.close()
    moved = {}
    for beta in (0.0, 3.0):
        policy = _flow()
        start = copy.deepcopy(policy)
        learner = PPOLearner(policy, PPOConfig(epochs=8, minibatches=2, lr=1e-4, lr_schedule="constant",
                                               logprob_level=level, kl_ref_coef=beta))
        for _ in range(3):
            stats = learner.update(traj)
        moved[beta] = _kl_from(policy, start, traj)
        assert ("ref_kl" in stats) == (beta > 0)
        if beta:
            assert all(torch.equal(a, b) for a, b in zip(learner.reference.parameters(), start.parameters()))
            assert not any(p.requires_grad for p in learner.reference.parameters())
    # lr 1e-4, 48 steps: about 1.8 without the penalty and 0.03 with it (chunk and action level)
    assert moved[0.0] > 0.2, moved  # without the penalty the updates move the policy
    assert moved[3.0] < 0.25 * moved[0.0], moved


def test_a_penalty_needs_a_reference_and_a_sign(tmp_path):
    with pytest.raises(ConfigError, match="ppo.kl_ref_coef: 0.1; allowed: 0, or > 0 with policy.init_from"):
        load_config(None, ["ppo.kl_ref_coef=0.1"])
    with pytest.raises(ConfigError, match="ppo.kl_ref_coef: -1.0"):
        load_config(None, ["ppo.kl_ref_coef=-1.0"])
    assert load_config(None, ["ppo.kl_ref_coef=0.1", f"policy.init_from={tmp_path}"]).ppo.kl_ref_coef == 0.1
