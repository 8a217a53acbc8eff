"""The flow VLA's RL likelihood (docs/rl.md, "What the flow log-probability is").

- The density is that of the whole sampled chain: every chunk position, every stochastic
  step. Its per-element factors are recomputed here from the Gaussian transitions, for
  N in {3, 4, 5, 10} denoising steps, at 1e-5; act and evaluate agree to 1e-6.
- The non-executed positions matter: perturbing them in a stored chain moves the executed
  positions' factors too (the expert attends across the chunk), so the executed positions'
  factors alone are not a density of anything.
- The estimator is unbiased: on a small problem with a controlled expert, the score-function
  gradient of the whole chain's density matches the pathwise (reparameterised) gradient, and
  scoring only the executed positions gives a gradient that is measurably wrong.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from policies.vla.config import FlowVLAConfig
from policies.vla.flow import FlowVLA
from test_vla_rl import TINY_VISION, _obs  # the tiny vision preset; a batch of observations


def _flow(method: str, steps: int, **kw) -> FlowVLA:
    torch.manual_seed(0)
    p = FlowVLA(FlowVLAConfig(num_steps=steps, noise_method=method, vision=dict(TINY_VISION), **kw))
    with torch.no_grad():  # a noise head that is not constant: per-element stds
        p.noise_head.proj.weight.normal_(0.0, 0.5)
    return p


def _hand_log_density(p: FlowVLA, obs: dict, chain: torch.Tensor, stochastic: torch.Tensor) -> torch.Tensor:
    """float64 [B, K, A]: the Gaussian log-density of every stochastic transition of `chain`,
    written out from the papers' transitions, one expert call per step, t = 1 - i / N."""
    cfg, A = p.config, p.config.action_dim
    B, N = stochastic.shape
    prefix, state = p.encode(obs)
    out = torch.zeros(B, chain.shape[2], A, dtype=torch.float64)
    dt = 1.0 / N
    with torch.no_grad():
        for i in range(N):
            t = 1.0 - i / N
            v, h = p.expert(prefix.kv, prefix.mask, state, chain[:, i], torch.full((B,), t), with_hidden=True)
            x = chain[:, i].double()
            v = v.double()
            if cfg.noise_method == "flow_noise":
                mean = x - dt * v
                std = cfg.noise_std_min + (cfg.noise_std_max - cfg.noise_std_min) * torch.sigmoid(
                    (h @ p.noise_head.proj.weight.T + p.noise_head.proj.bias).double())
            else:  # Flow-SDE, g_t evaluated at min(t, 1 - dt)
                ts = min(t, 1.0 - dt)
                g2 = cfg.sde_noise_level ** 2 * ts / (1.0 - ts)
                mean = x - dt * v - dt * g2 / (2.0 * t) * (x + (1.0 - t) * v)
                std = torch.full_like(mean, math.sqrt(g2 * dt))
            lp = torch.distributions.Normal(mean[..., :A], std[..., :A]).log_prob(chain[:, i + 1, :, :A].double())
            out += lp * stochastic[:, i, None, None]
    return out


@pytest.mark.parametrize("method", ["flow_noise", "flow_sde"])
@pytest.mark.parametrize("steps", [3, 4, 5, 10])
def test_chain_density_matches_the_gaussian_transitions_for_any_step_count(method, steps):
    p = _flow(method, steps, execute_steps=2, noise_std_min=0.2, noise_std_max=0.5, sde_noise_level=0.5)
    obs = _obs()
    out = p.act(obs)
    expect = _hand_log_density(p, obs, out.replay["chain"], out.replay["stochastic"])
    assert out.log_prob_parts.shape == (6, 4, 4)  # all K = 4 positions, 2 of them executed
    torch.testing.assert_close(out.log_prob_parts.double(), expect, atol=1e-5, rtol=0)
    ev = p.evaluate(obs, out.replay)
    assert (ev.log_prob - out.log_prob).abs().max() < 1e-6
    assert (ev.log_prob_parts - out.log_prob_parts).abs().max() < 1e-6


def test_non_executed_positions_move_the_executed_factors():
    p = _flow("flow_noise", 4, execute_steps=2)
    obs = _obs()
    out = p.act(obs)
    chain = out.replay["chain"].clone()
    chain[:, 1:-1, 2:] += 0.5  # the intermediate points of the two non-executed positions
    ev = p.evaluate(obs, dict(out.replay, chain=chain))
    expect = _hand_log_density(p, obs, chain, out.replay["stochastic"])  # far in the tails: rtol
    torch.testing.assert_close(ev.log_prob_parts.double(), expect, atol=1e-5, rtol=2e-6)
    # the executed positions' own factors changed although their points did not
    moved = (ev.log_prob_parts[:, :2] - out.log_prob_parts[:, :2]).abs().amax((1, 2))
    assert (moved > 1e-3).all(), moved


class _LinearExpert(nn.Module):
    """v = x @ mix^T over the chunk positions (position K-1 pulls the others) + bias; h = 0."""

    def __init__(self, K: int, width: int, hidden: int):
        super().__init__()
        mix = torch.eye(K) * 0.5
        mix[:, K - 1] += 1.5  # every position's velocity leans on the last position
        self.register_buffer("mix", mix)
        self.bias = nn.Parameter(torch.zeros(K, width))
        self.hidden = hidden

    def forward(self, kv, mask, state, x, t, with_hidden=False):
        v = torch.einsum("kj,bsja->bska", self.mix, x) + self.bias  # x [B, S, K, A_pad]
        return v, torch.zeros(*x.shape[:-1], self.hidden)


def test_whole_chain_score_function_is_unbiased_and_the_executed_part_alone_is_not():
    """d/d(bias of the non-executed position) of E[-||executed actions - 1||^2]: pathwise
    (reparameterised chain) vs score function with the whole chain's log-density. The executed
    positions' factors alone do not depend on that bias at all, so they give 0: biased."""
    torch.manual_seed(0)
    K, N, n, B = 4, 4, 2, 24_000
    p = FlowVLA(FlowVLAConfig(num_steps=N, chunk_size=K, execute_steps=n, noise_method="flow_noise",
                              noise_std_min=0.3, noise_std_max=0.3, vision=dict(TINY_VISION)))
    p.expert = _LinearExpert(K, p.config.max_action_dim, p.config.expert_hidden)
    theta = p.expert.bias
    prefix, state = SimpleNamespace(kv=None, mask=None), torch.zeros(B, p.config.max_state_dim)
    A = p.config.action_dim

    def reward(x_end: torch.Tensor) -> torch.Tensor:  # [B, K, A_pad] -> [B]
        return -((x_end[:, :n, :A] - 1.0) ** 2).sum((1, 2))

    # pathwise: x_{i+1} = mean(x_i) + std * eps, differentiated through the whole chain
    x = torch.randn(B, K, p.config.max_action_dim)
    times = p.time_grid(N)
    for i in range(N):
        mean, std, _ = p.transitions(prefix, state, x[:, None], times[i].expand(B, 1), "flow_noise", N)
        x = mean[:, 0] + std[:, 0] * torch.randn_like(x)
    (pathwise,) = torch.autograd.grad(reward(x).mean(), theta)

    # score function on fresh samples from the sampler, scored by chain_log_prob
    chain, stochastic = p.sample(prefix, state, torch.randn(B, K, p.config.max_action_dim), N, "flow_noise")
    r = reward(chain[:, -1])
    logp, _ = p.chain_log_prob(prefix, state, chain, stochastic)  # [B, K, A]
    weight = (r - r.mean()).detach()

    def estimate(scored: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Score-function gradient on the non-executed position's bias [A] from per-sample
        log-probs scored [B], and its standard error over 20 independent groups."""
        groups = [torch.autograd.grad((weight[g] * scored[g]).mean(), theta, retain_graph=True,
                                      allow_unused=True)[0] for g in torch.arange(B).chunk(20)]
        groups = torch.stack([torch.zeros_like(theta) if g is None else g for g in groups])[:, K - 1, :A]
        return groups.mean(0), groups.std(0) / math.sqrt(len(groups))

    whole, se = estimate(logp.sum((1, 2)))
    executed_only, _ = estimate(logp[:, :n].sum((1, 2)))
    pw = pathwise[K - 1, :A]  # the non-executed position's bias, on the real action dims
    assert (pw.abs() > 10 * se).all(), (pw, se)  # the true gradient is far from zero
    assert ((whole - pw).abs() < 4 * se + 0.02 * pw.abs()).all(), (whole, pw, se)
    assert ((executed_only - pw).abs() > 10 * se).all(), (executed_only, pw)  # biased: it is 0
