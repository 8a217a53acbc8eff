"""Low-rank adapters on nn.Linear layers, and freezing, for RL on a loaded VLA.

LoRA (Hu et al. 2021): a frozen Linear y = W x + b gains a trainable update
    y = W x + b + (alpha / r) * B (A x),   A [r, in] (Kaiming-uniform), B [out, r] (zeros)
so a fresh adapter leaves the outputs unchanged and only A, B train (r * (in + out) values
per layer). A VLA built with `lora_rank` > 0 (config; `policy.lora_rank` of `embodied train`)
wraps its prefix at construction, so its checkpoints reload with their adapters and resume
exactly. `merge_lora` folds B A into W and restores plain Linears (lora_rank 0).

trainable_summary(policy) states what RL will update: the count of trainable values, the
total, and the trainable ones per top-level module.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
from torch import nn


class LoRALinear(nn.Module):
    """A frozen Linear plus a rank-r update (see the module doc)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base, self.scale = base, alpha / rank
        base.requires_grad_(False)
        w = base.weight
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, dtype=w.dtype, device=w.device))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, dtype=w.dtype, device=w.device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x.to(self.lora_a.dtype) @ self.lora_a.T @ self.lora_b.T * self.scale).to(x.dtype)

    def merged(self) -> nn.Linear:
        with torch.no_grad():
            self.base.weight += (self.lora_b.float() @ self.lora_a.float() * self.scale).to(self.base.weight.dtype)
        return self.base


def apply_lora(module: nn.Module, rank: int, alpha: float | None = None,
               targets: Iterable[str] = ("q_proj", "k_proj", "v_proj", "o_proj", "out_proj", "q", "k", "v", "o")) -> int:
    """Freeze `module` and wrap every nn.Linear whose attribute name is in `targets` (the
    attention projections of the LM, the vision tower and the expert) in a LoRALinear.
    Returns the number of wrapped layers (0 is an error: nothing would train)."""
    if rank < 1:
        raise ValueError(f"lora rank: {rank} must be >= 1")
    targets = set(targets)
    module.requires_grad_(False)
    wrapped = 0
    for parent in list(module.modules()):
        if isinstance(parent, nn.MultiheadAttention):  # reads out_proj.weight itself (SigLIP's pooling head)
            continue
        for name, child in list(parent.named_children()):
            if name in targets and isinstance(child, nn.Linear):
                setattr(parent, name, LoRALinear(child, rank, float(alpha or rank)))
                wrapped += 1
    if wrapped == 0:
        raise ValueError(f"lora targets: no nn.Linear named {sorted(targets)} in {type(module).__name__}")
    return wrapped


def merge_lora(module: nn.Module) -> int:
    """Fold every adapter into its Linear (in place); returns how many were merged. A VLA's
    config then says lora_rank 0, so it saves and reloads as a plain policy."""
    merged = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                setattr(parent, name, child.merged())
                merged += 1
    if hasattr(getattr(module, "config", None), "lora_rank"):
        module.config.lora_rank = 0
    return merged


def trainable_summary(module: nn.Module) -> dict[str, int]:
    """{"trainable": n, "total": n, "<top-level child>": trainable in it, ...}."""
    out = {"trainable": 0, "total": 0}
    for name, p in module.named_parameters():
        out["total"] += p.numel()
        if p.requires_grad:
            out["trainable"] += p.numel()
            top = name.split(".")[0]
            out[top] = out.get(top, 0) + p.numel()
    return out
