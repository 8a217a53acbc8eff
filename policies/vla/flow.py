"""FlowVLA: a pi0-style flow-matching VLA.

Shapes: B batch, K chunk, A real action width, A_pad = max_action_dim, N Euler steps.

Conventions (DESIGN.md section 5): t ~ Beta(1.5, 1) * 0.999 + 0.001;
x_t = t * noise + (1 - t) * actions (normalised, zero-padded to A_pad); the expert predicts
u = noise - actions; sampling integrates dx/dt = u from t = 1 (noise) to t = 0 in N Euler
steps, x <- x - u / N. The vision-language prefix runs once per `act`; its KV cache is
reused by every denoising step (one prefix forward + N expert forwards).

act(deterministic=True) starts from zero noise (the chain's mean), otherwise from N(0, I).
This ODE sampler is deterministic given its start, so log_prob is 0 and entropy 0; the
replay record already holds the whole chain [B, N + 1, K, A_pad] and which steps were
stochastic, so that Flow-Noise / Flow-SDE can add per-step densities later.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from policies.base import ActOutput, Evaluation
from policies.vla.common import VLAPolicy
from policies.vla.config import FlowVLAConfig
from policies.vla.expert import ActionExpert
from policies.vla.prefix import Prefix, masked_mean


class FlowVLA(VLAPolicy):
    name = "flow_vla"
    config_class = FlowVLAConfig

    def __init__(self, config: FlowVLAConfig, _source_dir: Any = None):
        super().__init__(config, _source_dir)
        lm = self.prefix.lm_config
        heads = int(lm.num_attention_heads)
        head_dim = int(getattr(lm, "head_dim", None) or lm.hidden_size // heads)
        kv_heads = int(getattr(lm, "num_key_value_heads", None) or heads)
        self.expert = ActionExpert(
            layers=int(lm.num_hidden_layers), hidden=config.expert_hidden,
            intermediate=config.expert_intermediate, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            state_width=config.max_state_dim, action_width=config.max_action_dim,
            chunk=config.chunk_size, min_period=config.time_min_period, max_period=config.time_max_period)
        self._beta = torch.distributions.Beta(torch.tensor(1.5), torch.tensor(1.0))

    # -- pieces ------------------------------------------------------------------
    def encode(self, obs: dict[str, Any]) -> tuple[Prefix, torch.Tensor]:
        """One prefix forward: (Prefix with its KV cache, padded state [B, S_pad])."""
        B = obs["state"].shape[0]
        ids, mask = self.text(obs, B)
        prefix, _ = self.prefix(obs, ids, mask)
        return prefix, self.padded_state(obs)

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
        t = self._beta.sample((B,)).to(self.device) * 0.999 + 0.001
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

    @torch.no_grad()
    def sample(self, prefix: Prefix, state: torch.Tensor, noise: torch.Tensor, steps: int) -> torch.Tensor:
        """Euler from t=1 to t=0: noise [B, K, A_pad] -> chain [B, steps + 1, K, A_pad]."""
        x, chain = noise, [noise]
        B = noise.shape[0]
        for i in range(steps):
            t = torch.full((B,), 1.0 - i / steps, device=noise.device)
            x = x - self.velocity(prefix, state, x, t).float() / steps
            chain.append(x)
        return torch.stack(chain, dim=1)

    @torch.no_grad()
    def act(self, obs: dict[str, Any], deterministic: bool = False, num_steps: int | None = None) -> ActOutput:
        """Chunk float32 [B, n, A] in [-1, 1] (n = execute_steps or K); replay {"chain": [B, N+1, K, A_pad],
        "stochastic": bool [B, N]}."""
        N = num_steps or self.config.num_steps
        prefix, state = self.encode(obs)
        B, K = state.shape[0], self.config.chunk_size
        shape = (B, K, self.config.max_action_dim)
        noise = torch.zeros(shape, device=self.device) if deterministic else torch.randn(shape, device=self.device)
        chain = self.sample(prefix, state, noise, N)
        actions = self.action_stats.unnormalize(chain[:, -1, :, :self.config.action_dim]).clamp(-1.0, 1.0)
        value = self.value_from(masked_mean(prefix.hidden, prefix.mask))
        replay = {"chain": chain, "stochastic": torch.zeros(B, N, dtype=torch.bool, device=self.device)}
        return ActOutput(self.executed(actions), torch.zeros(B, device=self.device), value, replay)

    def evaluate(self, obs: dict[str, Any], replay: dict[str, torch.Tensor]) -> Evaluation:
        """The ODE chain has no stochastic step yet: log_prob and entropy are 0 [B]."""
        B = obs["state"].shape[0]
        value = self.get_value(obs) if self.critic is not None else None
        zeros = torch.zeros(B, device=self.device)
        return Evaluation(zeros, zeros, value)

    def get_value(self, obs: dict[str, Any]) -> torch.Tensor:
        if self.critic is None:
            raise NotImplementedError("FlowVLA was built with critic=False")
        B = obs["state"].shape[0]
        ids, mask = self.text(obs, B)
        prefix, _ = self.prefix(obs, ids, mask)
        return self.value_from(masked_mean(prefix.hidden, prefix.mask))
