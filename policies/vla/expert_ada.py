"""pi0.5's action expert: time enters through adaptive RMSNorm, the state through the prompt.

Same contract as expert.ActionExpert (per-layer prefix keys / values in, velocity out), with
pi0.5's layout: the suffix is the K action tokens only (the state is text in the prefix,
policies/vla/common.py `prompts`); the flow time t gives one conditioning vector per sample,
    c = silu(time_out(silu(time_in(sinusoid(t)))))                              [B, H]
and every RMSNorm of the expert (two per layer and the final one) is modulated by it:
    (scale, shift, gate) = dense(c);  norm(x) = x / rms(x) * (1 + scale) + shift
with gated residuals x + f(norm(x)) * gate after attention and MLP (the final norm's gate is
unused). Attention as in the Gemma expert: rotary positions P .. P + K - 1 after the prefix's
P real tokens, every action token sees the prefix and all action tokens of its group.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from policies.vla.expert import gelu_tanh, rotate, sinusoidal_time


class AdaRMSNorm(nn.Module):
    """x [..., H], cond [..., C] -> (x / rms(x) * (1 + scale) + shift, gate), in float32."""

    def __init__(self, dim: int, cond_dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)
        nn.init.zeros_(self.dense.weight)
        nn.init.zeros_(self.dense.bias)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        scale, shift, gate = self.dense(cond.to(self.dense.weight.dtype)).chunk(3, dim=-1)
        return (h * (1.0 + scale.float()) + shift.float()).to(x.dtype), gate.to(x.dtype)


class AdaExpertLayer(nn.Module):
    def __init__(self, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.norm1, self.norm2 = AdaRMSNorm(hidden, hidden), AdaRMSNorm(hidden, hidden)
        self.q = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, hidden, bias=False)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor,
                mask: torch.Tensor, rope: tuple[torch.Tensor, float]) -> torch.Tensor:
        """x [B, S, H], cond [B, S, H]; prefix_k/v [B, Hkv, T, Dh]; mask bool [B, 1, S, T + S]."""
        B, S, _ = x.shape
        h, g = self.norm1(x, cond)
        q = rotate(self.q(h).view(B, S, self.heads, self.head_dim).transpose(1, 2), *rope)
        k = rotate(self.k(h).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2), *rope)
        v = self.v(h).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        keys, values = torch.cat([prefix_k.to(k.dtype), k], 2), torch.cat([prefix_v.to(v.dtype), v], 2)
        rep = self.heads // self.kv_heads
        att = F.scaled_dot_product_attention(q, keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1),
                                             attn_mask=mask)
        x = x + self.o(att.transpose(1, 2).reshape(B, S, -1)) * g
        h, g = self.norm2(x, cond)
        return x + self.down(gelu_tanh(self.gate(h)) * self.up(h)) * g


class AdaActionExpert(nn.Module):
    """(prefix KV, noisy actions x_t, time t) -> velocity [B, K, A_pad]; `state` is accepted
    for the common signature and not read (pi0.5 reads it as text)."""

    def __init__(self, layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int,
                 action_width: int, min_period: float, max_period: float, rope_theta: float = 10000.0):
        super().__init__()
        self.hidden, self.min_period, self.max_period, self.rope_theta = hidden, min_period, max_period, rope_theta
        self.action_in = nn.Linear(action_width, hidden)
        self.time_in, self.time_out = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.layers = nn.ModuleList(AdaExpertLayer(hidden, intermediate, heads, kv_heads, head_dim)
                                    for _ in range(layers))
        self.norm = AdaRMSNorm(hidden, hidden)
        self.action_out = nn.Linear(hidden, action_width)

    def forward(self, kv: list[tuple[torch.Tensor, torch.Tensor]], prefix_mask: torch.Tensor,
                state: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor,
                with_hidden: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """As ActionExpert.forward: x_t [B, K, A_pad] at t [B], or G groups [B, G, K, A_pad] at [B, G]."""
        grouped = x_t.dim() == 4
        if not grouped:
            x_t, t = x_t[:, None], t[:, None]
        B, G, K, _ = x_t.shape
        H, dtype = self.hidden, self.action_in.weight.dtype
        time = sinusoidal_time(t.reshape(-1), H, self.min_period, self.max_period).to(dtype)
        cond = F.silu(self.time_out(F.silu(self.time_in(time)))).view(B, G, 1, H).expand(B, G, K, H)
        cond = cond.reshape(B, G * K, H)
        x = self.action_in(x_t.to(dtype)).reshape(B, G * K, H)
        start = prefix_mask.to(x_t.device).long().sum(1)  # [B] real prefix tokens
        rope = (start[:, None] + torch.arange(K, device=x_t.device).repeat(G)[None], self.rope_theta)
        group = torch.arange(G * K, device=x_t.device) // K
        own = (group[:, None] == group[None, :]).expand(B, G * K, G * K)
        seen = prefix_mask.to(x_t.device)[:, None, :].expand(B, G * K, -1)
        mask = torch.cat([seen, own], dim=2)[:, None]
        for layer, (pk, pv) in zip(self.layers, kv):
            x = layer(x, cond, pk, pv, mask, rope)
        h = self.norm(x, cond)[0].view(B, G, K, H)
        v = self.action_out(h)
        if not grouped:
            v, h = v[:, 0], h[:, 0]
        return (v, h) if with_hidden else v
