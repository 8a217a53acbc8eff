"""SmolVLA's action expert: self-attention and cross-attention layers, alternating.

Same contract as expert.ActionExpert (per-layer prefix keys / values in, velocity out); the
state is not an expert token (SmolVLA puts it in the prefix: FlowVLAConfig.state_in_prefix).
The suffix is the K action tokens, x_t and the flow time mixed by an MLP as in pi0. Llama-style
layers (RMSNorm x * w, SiLU-gated MLP); layer l is
  self-attention (l even): the action queries attend to [prefix keys / values of LM layer l ;
      their own], their own causally (action k sees actions 0..k); rotary positions P .. P+K-1
      after the prefix's P real tokens;
  cross-attention (l odd): the action queries, rotary positions 0 .. K-1, attend only to LM
      layer l's cached prefix keys / values, re-projected by this layer's k / v (whose input is
      the LM's key / value width; the cached keys already carry the LM's rotary rotation).
Rotary angles use the model's base for both towers (SmolVLA: 10000).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from policies.vla.expert import rotate, sinusoidal_time


class SmolExpertLayer(nn.Module):
    def __init__(self, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int,
                 cross: bool, prefix_kv_width: int, eps: float):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.cross = heads, kv_heads, head_dim, cross
        self.norm1, self.norm2 = nn.RMSNorm(hidden, eps=eps), nn.RMSNorm(hidden, eps=eps)
        kv_in = prefix_kv_width if cross else hidden
        self.q = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k = nn.Linear(kv_in, kv_heads * head_dim, bias=False)
        self.v = nn.Linear(kv_in, kv_heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, hidden, bias=False)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor, mask: torch.Tensor,
                positions: torch.Tensor, theta: float) -> torch.Tensor:
        """x [B, S, H]; prefix_k/v [B, Hkv', T, Dh] (the LM's); mask bool [B, 1, S, T (+ S)]; positions [B, S]."""
        B, S, _ = x.shape
        h = self.norm1(x)
        q = rotate(self.q(h).view(B, S, self.heads, self.head_dim).transpose(1, 2), positions, theta)
        if self.cross:  # the LM's keys / values, flattened per token, through this layer's k / v
            T, dtype = prefix_k.shape[2], self.k.weight.dtype
            keys = self.k(prefix_k.transpose(1, 2).reshape(B, T, -1).to(dtype))
            values = self.v(prefix_v.transpose(1, 2).reshape(B, T, -1).to(dtype))
            keys = keys.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
            values = values.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        else:
            k = rotate(self.k(h).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2), positions, theta)
            v = self.v(h).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
            keys, values = torch.cat([prefix_k.to(k.dtype), k], 2), torch.cat([prefix_v.to(v.dtype), v], 2)
        rep = self.heads // self.kv_heads
        att = F.scaled_dot_product_attention(q, keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1),
                                             attn_mask=mask)
        x = x + self.o(att.transpose(1, 2).reshape(B, S, -1))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class SmolActionExpert(nn.Module):
    """(prefix KV, noisy actions x_t, time t) -> velocity [B, K, A_pad]; `state` is accepted
    for the common signature and not read (it is a prefix token)."""

    def __init__(self, layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int,
                 prefix_kv_width: int, action_width: int, min_period: float, max_period: float,
                 rope_theta: float, eps: float, self_attn_every: int = 2):
        super().__init__()
        self.hidden, self.min_period, self.max_period, self.rope_theta = hidden, min_period, max_period, rope_theta
        self.action_in = nn.Linear(action_width, hidden)
        self.action_time = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.layers = nn.ModuleList(
            SmolExpertLayer(hidden, intermediate, heads, kv_heads, head_dim, i % self_attn_every != 0,
                            prefix_kv_width, eps) for i in range(layers))
        self.norm = nn.RMSNorm(hidden, eps=eps)
        self.action_out = nn.Linear(hidden, action_width)

    def forward(self, kv: list[tuple[torch.Tensor, torch.Tensor]], prefix_mask: torch.Tensor,
                state: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor,
                with_hidden: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """As ActionExpert.forward: x_t [B, K, A_pad] at t [B], or G groups [B, G, K, A_pad] at [B, G]."""
        grouped = x_t.dim() == 4
        if not grouped:
            x_t, t = x_t[:, None], t[:, None]
        B, G, K, _ = x_t.shape
        H, dtype, dev = self.hidden, self.action_in.weight.dtype, x_t.device
        time = sinusoidal_time(t.reshape(-1), H, self.min_period, self.max_period).to(dtype).view(B, G, 1, H)
        act = self.action_in(x_t.to(dtype))
        x = self.action_time(torch.cat([act, time.expand(B, G, K, H)], dim=-1)).reshape(B, G * K, H)
        k_idx = torch.arange(K, device=dev).repeat(G)  # position of each token within its group
        group = torch.arange(G * K, device=dev) // K
        pmask = prefix_mask.to(dev)
        start = pmask.long().sum(1)  # [B] real prefix tokens
        pos_self, pos_cross = start[:, None] + k_idx[None], k_idx[None].expand(B, -1)
        own = (group[:, None] == group[None, :]) & (k_idx[None, :] <= k_idx[:, None])  # causal within a group
        seen = pmask[:, None, :].expand(B, G * K, -1)
        mask_self = torch.cat([seen, own.expand(B, -1, -1)], dim=2)[:, None]
        mask_cross = seen[:, None]
        for layer, (pk, pv) in zip(self.layers, kv):
            if layer.cross:
                x = layer(x, pk, pv, mask_cross, pos_cross, self.rope_theta)
            else:
                x = layer(x, pk, pv, mask_self, pos_self, self.rope_theta)
        h = self.norm(x.view(B, G, K, H))
        v = self.action_out(h)
        if not grouped:
            v, h = v[:, 0], h[:, 0]
        return (v, h) if with_hidden else v
