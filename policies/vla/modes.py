"""Training modes that fit a real-size VLA on one GPU (docs/vla.md, "Training modes").

One call, `apply_modes(policy, ...)`, after the policy is built and before its optimiser:
  freeze         "none": every weight trains; "vision": the SigLIP tower and its projector are
                 frozen; "vlm": the whole vision-language prefix is frozen (flow policy: the action
                 expert, its noise head and the critic train)
  lora_rank      > 0: rank-r adapters on the prefix's attention projections (policies/vla/lora.py),
                 the rest of the prefix frozen, the action expert trained
  frozen_dtype   "bfloat16": every frozen parameter is stored in bf16 (2 bytes instead of 4); the
                 trainable ones stay float32, so the optimiser state and the updates are float32
  checkpointing  activations of the vision tower's, the LM's and the action expert's layers are
                 recomputed in the backward pass (torch.utils.checkpoint, non-reentrant) instead of
                 kept: memory of one layer's activations plus each layer's input, for one more
                 forward of the trainable path. Only where gradients are taken: act and the
                 no-grad forwards run as before.

`shared_reference(policy)` is the frozen reference of a KL penalty: a deep copy that shares the
policy's frozen parameters (the same storage) and copies only the trainable ones (with LoRA: the
adapters), so it costs the trainable part, not a second model.

The LM's decoder layers write the prefix's KV cache, which the action expert reads; a layer
that transformers checkpoints drops the cache (its recompute would write it twice). Here each
checkpointed decoder layer writes its keys / values into a throw-away recorder inside the
checkpoint and into the real cache outside it, so the recompute writes nothing twice.
"""

from __future__ import annotations

import copy
import types
from typing import Any, Iterable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

FREEZE = ("none", "vision", "vlm")
FROZEN_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class ModeError(ValueError):
    """A training mode the policy does not allow (one line naming the setting)."""


def frozen_modules(policy: nn.Module, freeze: str) -> list[nn.Module]:
    """The modules `freeze` leaves alone (see the module doc)."""
    if freeze not in FREEZE:
        raise ModeError(f"freeze: {freeze!r} is not allowed; choose one of {', '.join(FREEZE)}")
    prefix = policy.prefix
    return {"none": [], "vision": [prefix.vision, prefix.projector], "vlm": [prefix]}[freeze]


def apply_modes(policy: nn.Module, freeze: str = "none", lora_rank: int = 0, frozen_dtype: str = "float32",
                checkpointing: bool = False) -> nn.Module:
    """Freeze / adapt / cast / checkpoint `policy` (a FlowVLA or ARVLA) in place; returns it."""
    if freeze == "vlm" and getattr(policy, "name", "") != "flow_vla":
        raise ModeError("freeze=vlm applies to flow_vla only (the AR policy's actions are LM tokens); use none or vision")
    if lora_rank < 0:
        raise ModeError(f"lora_rank: {lora_rank} must be >= 0 (0: no adapters)")
    if frozen_dtype not in FROZEN_DTYPES:
        raise ModeError(f"frozen_dtype: {frozen_dtype!r} is not allowed; choose one of {', '.join(FROZEN_DTYPES)}")
    have = policy.config.lora_rank
    if lora_rank and have not in (0, lora_rank):
        raise ModeError(f"lora_rank: the policy already holds rank-{have} adapters, not {lora_rank}")
    if lora_rank and not have:  # adapters on the prefix, the rest of it frozen
        from policies.vla.lora import apply_lora

        apply_lora(policy.prefix, lora_rank)
        policy.config.lora_rank = lora_rank
    for module in frozen_modules(policy, freeze):
        module.requires_grad_(False)
    if frozen_dtype != "float32":
        cast_frozen(policy, FROZEN_DTYPES[frozen_dtype])
    if checkpointing:
        checkpoint_layers(policy)
    return policy


def cast_frozen(policy: nn.Module, dtype: torch.dtype) -> int:
    """Store every frozen floating-point parameter in `dtype`, in place (trainable ones, buffers
    and the normalisation statistics keep theirs). Returns the count of values cast."""
    cast = 0
    for p in policy.parameters():
        if not p.requires_grad and p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
            cast += p.numel()
    return cast


# -- activation checkpointing ------------------------------------------------------------
class _KVRecorder:
    """Stands in for the cache inside one checkpointed decoder layer: keeps the layer's keys and
    values and hands them back, as a fresh cache would."""

    def __init__(self) -> None:
        self.kv: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        self.kv = (keys, values)
        return keys, values


def _cache_len(cache: Any, idx: int) -> int:
    return 0 if cache is None else int(cache.get_seq_length(idx))


def _checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """The forward of a checkpointed layer (see `_checkpointed`). It calls the class's forward on
    `self`, so a deep copy of the layer (the KL reference) runs its own weights."""
    plain = types.MethodType(type(self).forward, self)
    index = self._checkpoint_index
    cache = kwargs.get("past_key_values")
    if not torch.is_grad_enabled() or (index is not None and _cache_len(cache, index) > 0):
        return plain(*args, **kwargs)  # no gradients, or decoding after a cached prefix
    if index is None or cache is None:
        return checkpoint(plain, *args, use_reentrant=False, **kwargs)

    def run(*a: Any) -> Any:
        rec = _KVRecorder()
        out = plain(*a, **{**kwargs, "past_key_values": rec})
        return (out, *rec.kv) if rec.kv is not None else (out,)

    out, *kv = checkpoint(run, *args, use_reentrant=False)
    if kv:
        cache.update(kv[0], kv[1], index)
    return out


def _checkpointed(module: nn.Module, index: int | None) -> None:
    """Give `module` (this instance only: its weights and their names are untouched) a forward
    that checkpoints while gradients are taken. index: the decoder layer's index in the LM's KV
    cache, or None for a layer that writes no cache."""
    module._checkpoint_index = index
    module.forward = types.MethodType(_checkpointed_forward, module)


def _decoder_layers(lm: nn.Module) -> Iterable[nn.Module]:
    base = lm.model if hasattr(lm, "lm_head") else lm
    return getattr(base, "layers", [])


def checkpoint_layers(policy: nn.Module) -> int:
    """Checkpoint the layers of the vision tower, the LM and the action expert (module doc);
    returns how many layers are checkpointed. Calling it twice changes nothing."""
    done = 0
    towers = [m for name, m in policy.prefix.vision.named_modules()  # SigLIP's encoder.layers, DINOv2's encoder.layer
              if isinstance(m, nn.ModuleList) and name.split(".")[-1] in ("layers", "layer")]
    groups = [(list(t), False) for t in towers] + [(list(_decoder_layers(policy.prefix.lm)), True)]
    if hasattr(policy, "expert"):
        groups.append((list(policy.expert.layers), False))
    for layers, writes_cache in groups:
        for i, layer in enumerate(layers):
            if not hasattr(layer, "_checkpoint_index"):
                _checkpointed(layer, i if writes_cache else None)
            done += 1
    return done


# -- the KL reference ------------------------------------------------------------------
def shared_reference(policy: nn.Module) -> nn.Module:
    """A frozen copy of `policy` as it is now that shares its frozen parameters (the same tensors,
    the same storage) and copies the trainable ones: the reference of a KL penalty at the cost of
    the trainable part (with LoRA the adapters; with freeze=vlm the action expert). Equal to
    copy.deepcopy when every parameter trains."""
    shared = {id(p): p for p in policy.parameters() if not p.requires_grad}
    return copy.deepcopy(policy, memo=dict(shared)).requires_grad_(False)
