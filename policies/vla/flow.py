"""FlowVLA: a pi0-style flow-matching VLA.

Shapes: B batch, K chunk, A real action width, A_pad = max_action_dim, N Euler steps.

Conventions (DESIGN.md section 5): t ~ Beta(1.5, 1) * 0.999 + 0.001;
x_t = t * noise + (1 - t) * actions (normalised, zero-padded to A_pad); the expert predicts
u = noise - actions; sampling integrates dx/dt = u from t = 1 (noise) to t = 0 in N Euler
steps, x <- x - u / N. The vision-language prefix runs once per `act`; its KV cache is
reused by every denoising step (one prefix forward + N expert forwards).

act(deterministic=True) integrates the ODE from zero noise (the prior's mean). Otherwise it
starts from N(0, I) and `config.noise_method` picks the exploration: "ode" (no stochastic
step, log_prob 0), "flow_noise" or "flow_sde" (policies/vla/exploration.py). The replay
record holds the whole chain [B, N + 1, K, A_pad] and which steps were stochastic;
`evaluate` recomputes the Gaussian log-density of those transitions, over the whole chunk
(executed or not), under the current weights with one batched expert forward over the stored
chain. Sampling and scoring read their times from one grid (`time_grid`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from policies.base import ActOutput, Evaluation
from policies.vla.common import VLAPolicy
from policies.vla.config import FlowVLAConfig
from policies.vla.expert import ActionExpert
from policies.vla.expert_ada import AdaActionExpert
from policies.vla.expert_smol import SmolActionExpert
from policies.vla.exploration import NoiseHead, gaussian_entropy, gaussian_log_density, sde_step
from policies.vla.prefix import Prefix, masked_mean


def sum_parts(parts: torch.Tensor) -> torch.Tensor:
    """Per-element log-densities [B, K, A] -> their sum [B], accumulated in float64 so that the
    same parts give the same sum to well below 1e-6 whatever the batch."""
    return parts.double().sum((1, 2)).float()


def _rope_theta(lm_config: Any) -> float:
    """The LM's rotary base (transformers 5 keeps it in rope_parameters)."""
    params = getattr(lm_config, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(lm_config, "rope_theta", 10000.0)))


class FlowVLA(VLAPolicy):
    name = "flow_vla"
    config_class = FlowVLAConfig

    def __init__(self, config: FlowVLAConfig, _source_dir: Any = None):
        super().__init__(config, _source_dir)
        lm = self.prefix.lm_config
        heads = int(lm.num_attention_heads)
        head_dim = int(getattr(lm, "head_dim", None) or lm.hidden_size // heads)
        kv_heads = int(getattr(lm, "num_key_value_heads", None) or heads)
        if config.expert_arch == "smolvla":  # SmolVLA: self- and cross-attention layers, state in the prefix
            self.expert = SmolActionExpert(
                layers=int(lm.num_hidden_layers), hidden=config.expert_hidden,
                intermediate=config.expert_intermediate, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                prefix_kv_width=kv_heads * head_dim, action_width=config.max_action_dim,
                min_period=config.time_min_period, max_period=config.time_max_period, rope_theta=_rope_theta(lm),
                eps=float(getattr(lm, "rms_norm_eps", 1e-6)))
        elif config.expert_arch == "gemma_ada":  # pi0.5: adaptive-RMSNorm time conditioning, state as text
            self.expert = AdaActionExpert(
                layers=int(lm.num_hidden_layers), hidden=config.expert_hidden,
                intermediate=config.expert_intermediate, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                action_width=config.max_action_dim, min_period=config.time_min_period,
                max_period=config.time_max_period, rope_theta=_rope_theta(lm))
        else:
            self.expert = ActionExpert(
                layers=int(lm.num_hidden_layers), hidden=config.expert_hidden,
                intermediate=config.expert_intermediate, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                state_width=config.max_state_dim, action_width=config.max_action_dim,
                chunk=config.chunk_size, min_period=config.time_min_period, max_period=config.time_max_period,
                arch=config.expert_arch, rope_theta=_rope_theta(lm))
        if config.state_in_prefix:  # the state as one prefix token after the instruction (SmolVLA)
            self.state_proj = torch.nn.Linear(config.max_state_dim, self.prefix.width)
        self.noise_head = NoiseHead(config.expert_hidden, config.max_action_dim)

    # -- pieces ------------------------------------------------------------------
    def encode(self, obs: dict[str, Any]) -> tuple[Prefix, torch.Tensor]:
        """One prefix forward: (Prefix with its KV cache, padded state [B, S_pad])."""
        state = self.padded_state(obs)
        return self._prefix(obs, state), state

    def _prefix(self, obs: dict[str, Any], state: torch.Tensor) -> Prefix:
        ids, mask = self.text(obs, state.shape[0])
        extra = self.state_proj(state.to(self.state_proj.weight.dtype))[:, None] if self.config.state_in_prefix else None
        return self.prefix(obs, ids, mask, extra)[0]

    def velocity(self, prefix: Prefix, state: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """One expert forward over the cached prefix: u [B, K, A_pad]."""
        return self.expert(prefix.kv, prefix.mask, state, x_t, t)

    def _pad(self, a: torch.Tensor) -> torch.Tensor:
        """Normalised actions [B, K, A] -> [B, K, A_pad]."""
        return F.pad(self.action_stats.normalize(a), (0, self.config.max_action_dim - a.shape[-1]))

    # -- Policy contract ------------------------------------------------------------
    def sft_loss(self, obs: dict[str, Any], actions: torch.Tensor) -> torch.Tensor:
        """Flow-matching MSE on demonstrated chunks [B, K, A]; obs['action_valid'] bool [B, K]
        (optional) masks steps past an episode's end."""
        prefix, state = self.encode(obs)
        a = self._pad(actions.to(self.device))
        B = a.shape[0]
        # flow time t ~ Beta(1.5, 1) [B], drawn on the model's device, kept in [0.001, 1]
        t = torch.distributions.Beta(torch.full((B,), 1.5, device=self.device),
                                     torch.ones(B, device=self.device)).sample() * 0.999 + 0.001
        noise = torch.randn_like(a)
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * a
        u = self.velocity(prefix, state, x_t, t)
        err = (u.float() - (noise - a)) ** 2  # [B, K, A_pad]
        err = err[..., :self.config.action_dim].mean(-1)  # padded dims carry no loss
        valid = obs.get("action_valid")
        if valid is None:
            return err.mean()
        w = valid.to(err.device, err.dtype)
        return (err * w).sum() / w.sum().clamp(min=1.0)

    # -- denoising steps ------------------------------------------------------------
    def transitions(self, prefix: Prefix, state: torch.Tensor, x: torch.Tensor, t: torch.Tensor,
                    method: str, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """S denoising steps per row in one expert forward (S groups of tokens per row).

        x [B, S, K, A_pad] at times t [B, S] -> (mean, std, ode) each [B, S, K, A_pad]: the
        next point's Gaussian under `method` (std 0 for "ode" and for padded dims, which
        always follow the ODE) and the plain ODE step x - dt * v. See exploration.py.
        """
        dt = 1.0 / steps
        x = x.float()
        v, h = self.expert(prefix.kv, prefix.mask, state, x, t, with_hidden=True)  # [B, S, K, ...]
        v = v.float()
        ode = x - dt * v
        mean, std = ode, torch.zeros_like(x)
        if method == "flow_sde":
            mean, g = sde_step(x, v, t, dt, self.config.sde_noise_level)
            std = std + g
        elif method == "flow_noise":
            std = self.noise_head(h, self.config.noise_std_min, self.config.noise_std_max).float()
        A = self.config.action_dim
        mean = torch.cat([mean[..., :A], ode[..., A:]], dim=-1)
        std = torch.cat([std[..., :A], torch.zeros_like(std[..., A:])], dim=-1)
        return mean, std, ode

    @staticmethod
    def time_grid(steps: int, device: Any = None) -> torch.Tensor:
        """The denoising times float32 [steps]: t_i = 1 - i / steps, i = 0 .. steps - 1 (t_0 = 1 is
        pure noise). Sampling and scoring both index this one grid, so the time embedding sees
        bit-identical t in act and in evaluate."""
        return (1.0 - torch.arange(steps, dtype=torch.float64, device=device) / steps).float()

    @torch.no_grad()
    def sample(self, prefix: Prefix, state: torch.Tensor, noise: torch.Tensor, steps: int,
               method: str = "ode") -> tuple[torch.Tensor, torch.Tensor]:
        """From t=1 to t=0: noise [B, K, A_pad] -> chain [B, steps + 1, K, A_pad] and the mask
        of stochastic steps bool [B, steps] (every step for flow_noise, one random step per
        row for flow_sde, none for ode). One expert forward per step, on the cached prefix."""
        B = noise.shape[0]
        if method == "flow_sde":
            stochastic = F.one_hot(torch.randint(steps, (B,), device=noise.device), steps).bool()
        else:
            stochastic = torch.full((B, steps), method == "flow_noise", device=noise.device)
        times = self.time_grid(steps, noise.device)
        x, chain = noise, [noise]
        for i in range(steps):
            t = times[i].expand(B, 1)
            mean, std, ode = (z[:, 0] for z in self.transitions(prefix, state, x[:, None], t, method, steps))
            noisy = mean + std * torch.randn_like(mean)
            x = torch.where(stochastic[:, i, None, None], noisy, ode)
            chain.append(x)
        return torch.stack(chain, dim=1), stochastic

    def chain_log_prob(self, prefix: Prefix, state: torch.Tensor, chain: torch.Tensor,
                       stochastic: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-density of the stored chain's stochastic transitions under the current weights.

        chain [B, N + 1, K, A_pad], stochastic bool [B, N] -> (log-prob, entropy), each
        float32 [B, K, A]: per element of the WHOLE chunk (executed or not), summed over the
        stochastic steps. Given x_t every element of the next point is an independent Gaussian,
        so the chain's density is the product of these factors over steps, positions and
        elements. Flow-Noise evaluates all N steps in one batched expert forward; Flow-SDE only
        its one stochastic step (more than one is an error: it would be scored as one).
        """
        method, A = self.config.noise_method, self.config.action_dim
        B, N = stochastic.shape
        times = self.time_grid(N, chain.device)  # [N]
        if method == "flow_sde":
            count = stochastic.sum(1)
            if (count > 1).any():
                raise ValueError(f"flow_sde replay: {int(count.max())} stochastic steps in one chain; "
                                 "Flow-SDE samples and scores exactly one per chunk")
            j = stochastic.float().argmax(1)  # [B] the one stochastic step
            rows = torch.arange(B, device=chain.device)
            x_in, x_out = chain[rows, j][:, None], chain[rows, j + 1][:, None]  # [B, 1, K, A_pad]
            t, mask = times[j][:, None], stochastic[rows, j][:, None]  # [B, 1]
        else:
            x_in, x_out, t, mask = chain[:, :-1], chain[:, 1:], times.expand(B, N), stochastic
        mean, std, _ = self.transitions(prefix, state, x_in, t, method, N)
        w = mask[..., None, None].float()  # [B, S, 1, 1]
        safe = torch.where(w > 0, std[..., :A], torch.ones_like(std[..., :A]))
        logp = gaussian_log_density(x_out[..., :A], mean[..., :A], safe) * w
        ent = gaussian_entropy(safe) * w
        return logp.sum(1), ent.sum(1)

    # -- Policy contract (RL) ----------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: dict[str, Any], deterministic: bool = False, num_steps: int | None = None) -> ActOutput:
        """Chunk float32 [B, n, A] in [-1, 1] (n = execute_steps or K).

        deterministic: the ODE from zero noise (the prior's mean). Otherwise noise ~ N(0, I)
        and config.noise_method's stochastic steps. log_prob [B] is the log-density of the
        whole sampled chain (all K chunk positions, every stochastic step; 0 for "ode"), and
        log_prob_parts [B, K, A] splits it per chunk element, executed positions first: the
        expert attends across the chunk, so the executed positions' means depend on the others,
        and only the whole chain has a density that the score function can use (docs/rl.md).
        The executed actions are the chain's end, unnormalised and clamped to [-1, 1]: the clamp
        belongs to the environment, the density is that of the unclamped chain.
        replay {"chain": [B, N+1, K, A_pad], "stochastic": bool [B, N]}.
        """
        N = num_steps or self.config.num_steps
        prefix, state = self.encode(obs)
        B, K = state.shape[0], self.config.chunk_size
        shape = (B, K, self.config.max_action_dim)
        method = "ode" if deterministic else self.config.noise_method
        noise = torch.zeros(shape, device=self.device) if deterministic else torch.randn(shape, device=self.device)
        chain, stochastic = self.sample(prefix, state, noise, N, method)
        actions = self.action_stats.unnormalize(chain[:, -1, :, :self.config.action_dim]).clamp(-1.0, 1.0)
        value = self.value_from(masked_mean(prefix.hidden, prefix.mask), obs)
        if stochastic.any():
            parts = self.chain_log_prob(prefix, state, chain, stochastic)[0]
        else:
            parts = torch.zeros(B, K, self.config.action_dim, device=self.device)
        replay = {"chain": chain, "stochastic": stochastic}
        return ActOutput(self.executed(actions), sum_parts(parts), value, replay, parts)

    def evaluate(self, obs: dict[str, Any], replay: dict[str, torch.Tensor]) -> Evaluation:
        """Recompute log_prob [B] (and parts [B, K, A]), entropy [B] and value [B] for a replay
        record of act; one prefix forward plus one batched expert forward. The entropy is that
        of the stochastic transitions' Gaussians over the whole chunk (Flow-Noise: the noise
        head's stds; Flow-SDE: fixed by the schedule, so it has no gradient)."""
        prefix, state = self.encode(obs)
        chain, stochastic = replay["chain"].to(self.device), replay["stochastic"].to(self.device)
        if stochastic.any():
            parts, ent = self.chain_log_prob(prefix, state, chain, stochastic)
            entropy = ent.sum((1, 2))
        else:
            parts = torch.zeros(chain.shape[0], chain.shape[2], self.config.action_dim, device=self.device)
            entropy = parts.sum((1, 2))
        value = self.value_from(masked_mean(prefix.hidden, prefix.mask), obs)
        return Evaluation(sum_parts(parts), entropy, value, parts)

    def get_value(self, obs: dict[str, Any]) -> torch.Tensor:
        if self.critic is None:
            raise NotImplementedError("FlowVLA was built with critic=False")
        if self.config.critic_obs == "privileged":
            return self.value_from(None, obs)
        prefix = self._prefix(obs, self.padded_state(obs))
        return self.value_from(masked_mean(prefix.hidden, prefix.mask), obs)
