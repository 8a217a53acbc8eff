"""The action expert: a small transformer over [state token; K noisy action tokens] whose
layer l attends to [prefix keys/values of LM layer l ; its own keys/values].

The prefix KV cache is explicit: `ActionExpert.forward` takes the list of per-layer
(keys, values) [B, Hkv, T, Dh] computed once per `act`, so N denoising steps cost N
expert forwards and no LM forward. The expert's heads have the LM's head width Dh (its
queries meet the LM's keys); its hidden width is its own (smaller).

Two layouts (`arch`):
  "toolkit": RMSNorm x * w, SiLU-gated MLP, a learned position per token, and every token
             of a group sees its whole group (state and actions);
  "gemma":   pi0's Gemma expert: RMSNorm x * (1 + w) computed in float32, tanh-GELU-gated
             MLP, rotary positions continuing after the prefix's real tokens (the state at
             position P, action k at P + 1 + k; the LM's rope_theta), no learned positions,
             and the state token blind to the action tokens (pi0's block mask: prefix | state
             | actions, each block seeing itself and the blocks before it).
pi0.5's expert ("gemma_ada") is policies/vla/expert_ada.py, SmolVLA's ("smolvla") expert_smol.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sinusoidal_time(t: torch.Tensor, dim: int, min_period: float, max_period: float) -> torch.Tensor:
    """float [B] times in [0, 1] -> float [B, dim] sin/cos features at log-spaced periods."""
    frac = torch.linspace(0.0, 1.0, dim // 2, device=t.device, dtype=torch.float32)
    period = min_period * (max_period / min_period) ** frac
    angle = (2 * math.pi / period)[None, :] * t.float()[:, None]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)


ARCHS = ("toolkit", "gemma", "gemma_ada", "smolvla")  # gemma_ada: pi0.5 (expert_ada.py); smolvla: expert_smol.py


class OffsetRMSNorm(nn.Module):
    """Gemma's RMSNorm: x / rms(x) * (1 + w) in float32, weight initialised to 0."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)


def gelu_tanh(z: torch.Tensor) -> torch.Tensor:
    return F.gelu(z, approximate="tanh")


def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (the half-split convention of Llama / Gemma): x [B, H, S, Dh] at
    int positions [B, S] -> x * cos + rotate_half(x) * sin, angles computed in float32."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.int64).float() / d))
    freqs = positions.float()[..., None] * inv  # [B, S, Dh/2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # [B, 1, S, Dh]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
    return x * cos + half * sin


class ExpertLayer(nn.Module):
    """Pre-norm attention (own queries over prefix + own keys) and a gated MLP."""

    def __init__(self, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int,
                 arch: str = "toolkit"):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        norm = OffsetRMSNorm if arch == "gemma" else nn.RMSNorm
        self.norm1, self.norm2 = norm(hidden, eps=1e-6), norm(hidden, eps=1e-6)
        self.act = gelu_tanh if arch == "gemma" else F.silu
        self.q = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, hidden, bias=False)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor,
                mask: torch.Tensor, rope: tuple[torch.Tensor, float] | None = None) -> torch.Tensor:
        """x [B, S, H]; prefix_k/v [B, Hkv, T, Dh]; mask bool [B, 1, 1 or S, T + S] (keys to see);
        rope: (positions int [B, S], theta) rotates this layer's queries and keys."""
        B, S, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(B, S, self.heads, self.head_dim).transpose(1, 2)  # [B, Hq, S, Dh]
        k = self.k(h).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)  # [B, Hkv, S, Dh]
        v = self.v(h).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        keys = torch.cat([prefix_k.to(k.dtype), k], dim=2)  # [B, Hkv, T + S, Dh]
        values = torch.cat([prefix_v.to(v.dtype), v], dim=2)
        rep = self.heads // self.kv_heads  # grouped-query attention: share kv heads
        keys, values = keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1)
        att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [B, Hq, S, Dh]
        x = x + self.o(att.transpose(1, 2).reshape(B, S, -1))
        h = self.norm2(x)
        return x + self.down(self.act(self.gate(h)) * self.up(h))


class ActionExpert(nn.Module):
    """(prefix KV, state, noisy actions x_t, time t) -> velocity v [B, K, A_pad] ~ noise - actions."""

    def __init__(self, layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int,
                 head_dim: int, state_width: int, action_width: int, chunk: int,
                 min_period: float, max_period: float, arch: str = "toolkit", rope_theta: float = 10000.0):
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"expert_arch: {arch!r} is not allowed; choose one of {', '.join(ARCHS)}")
        self.hidden, self.min_period, self.max_period = hidden, min_period, max_period
        self.arch, self.rope_theta = arch, rope_theta
        self.state_in = nn.Linear(state_width, hidden)
        self.action_in = nn.Linear(action_width, hidden)
        self.action_time = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        if arch == "toolkit":
            self.position = nn.Parameter(torch.randn(1 + chunk, hidden) * 0.02)  # [state; K actions]
        self.layers = nn.ModuleList(ExpertLayer(hidden, intermediate, heads, kv_heads, head_dim, arch)
                                    for _ in range(layers))
        self.norm = OffsetRMSNorm(hidden) if arch == "gemma" else nn.RMSNorm(hidden, eps=1e-6)
        self.action_out = nn.Linear(hidden, action_width)

    def forward(self, kv: list[tuple[torch.Tensor, torch.Tensor]], prefix_mask: torch.Tensor,
                state: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor,
                with_hidden: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """kv: per LM layer [B, Hkv, T, Dh]; prefix_mask bool [B, T]; state [B, S_pad];
        x_t [B, K, A_pad] at t [B] -> v [B, K, A_pad] (and, with_hidden, the action tokens'
        final hidden states [B, K, H], which the Flow-Noise head reads).

        Several denoising points of each sample, x_t [B, G, K, A_pad] at t [B, G], run as G
        groups of tokens in one sequence: each group sees the prefix and its own tokens only,
        so it equals G separate forwards while the prefix keys are read in place, not copied
        G times. Outputs are then [B, G, K, ...]."""
        grouped = x_t.dim() == 4
        if not grouped:
            x_t, t = x_t[:, None], t[:, None]
        B, G, K, _ = x_t.shape
        L, H = 1 + K, self.hidden  # tokens per group: [state; K actions]
        dtype = self.action_in.weight.dtype
        time = sinusoidal_time(t.reshape(-1), H, self.min_period, self.max_period).to(dtype).view(B, G, 1, H)
        act = self.action_in(x_t.to(dtype))  # [B, G, K, H]
        act = self.action_time(torch.cat([act, time.expand(B, G, K, H)], dim=-1))
        st = self.state_in(state.to(dtype))[:, None, None].expand(B, G, 1, H)
        x = torch.cat([st, act], dim=2)
        rope = None
        if self.arch == "toolkit":
            x = x + self.position
        else:  # rotary positions after the prefix's real tokens: P, P + 1, ..., P + K per group
            start = prefix_mask.to(x_t.device).long().sum(1)  # [B]
            rope = ((start[:, None] + torch.arange(L, device=x_t.device).repeat(G)[None]), self.rope_theta)
        x = x.reshape(B, G * L, H)
        idx = torch.arange(G * L, device=x_t.device)
        group = idx // L
        own = group[:, None] == group[None, :]  # block-diagonal: each group sees only itself
        if self.arch == "gemma":  # the state token (index 0 of its group) does not see the actions
            own = own & ~((idx[:, None] % L == 0) & (idx[None, :] % L != 0))
        own = own.expand(B, G * L, G * L)
        seen = prefix_mask.to(x_t.device)[:, None, :].expand(B, G * L, -1)
        mask = torch.cat([seen, own], dim=2)[:, None]  # [B, 1, G * L, T + G * L]
        for layer, (pk, pv) in zip(self.layers, kv):
            x = layer(x, pk, pv, mask, rope)
        h = self.norm(x.view(B, G, L, H)[:, :, 1:])  # [B, G, K, H]
        v = self.action_out(h)
        if not grouped:
            v, h = v[:, 0], h[:, 0]
        return (v, h) if with_hidden else v
