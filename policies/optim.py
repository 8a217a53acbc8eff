"""The optimisers a learner may build, by name (`ppo.optimizer` of `embodied train`, `optimizer` of
`embodied sft`), and what their state costs per trained parameter (policies/memory.py).

  adam        torch's Adam / AdamW, its default implementation (foreach on CUDA): two float32
              moments, 8 bytes per trained parameter
  adam_fused  torch's fused kernel (`fused=True`, CUDA and CPU): the same state and the same
              update, one kernel per step, no per-step copies of the parameter list
  adam_8bit   bitsandbytes' block-wise 8-bit Adam / AdamW (Dettmers et al. 2022): both moments
              in uint8 with a float32 scale per block of 256, about 2 bytes per trained parameter
              (tensors under 4096 values keep float32 moments); on CUDA and CPU

All three take the same param groups (with their own "lr") and the same hyper-parameters; with
weight_decay None the plain Adam update (no decay), with a value AdamW's decoupled decay.
"""

from __future__ import annotations

from typing import Any

import torch

OPTIMIZERS = ("adam", "adam_fused", "adam_8bit")
STATE_BYTES = {"adam": 8.0, "adam_fused": 8.0, "adam_8bit": 2.0 + 8.0 / 256}  # per trained parameter


class OptimizerError(ValueError):
    """An optimiser name that is not allowed, or one whose library is missing (one line)."""


def check_optimizer(name: str, field: str = "optimizer") -> None:
    if name not in OPTIMIZERS:
        raise OptimizerError(f"{field}: {name!r} is not allowed; choose one of {', '.join(OPTIMIZERS)}")
    if name == "adam_8bit":
        import importlib.util

        if importlib.util.find_spec("bitsandbytes") is None:
            raise OptimizerError(f"{field}: adam_8bit needs bitsandbytes (pip install -c constraints.txt "
                                 "bitsandbytes; it is in the vla extra)")


def make_optimizer(groups: Any, name: str = "adam", lr: float = 1e-3, eps: float = 1e-8,
                   weight_decay: float | None = None, field: str = "optimizer") -> torch.optim.Optimizer:
    """An optimiser `name` over `groups` (parameters or param-group dicts, as torch takes them)."""
    check_optimizer(name, field)
    kw: dict[str, Any] = {"lr": lr, "eps": eps}
    decoupled = weight_decay is not None
    if decoupled:
        kw["weight_decay"] = weight_decay
    if name == "adam_8bit":
        import bitsandbytes as bnb

        return (bnb.optim.AdamW8bit if decoupled else bnb.optim.Adam8bit)(groups, **kw)
    if name == "adam_fused":
        kw["fused"] = True
    return (torch.optim.AdamW if decoupled else torch.optim.Adam)(groups, **kw)
