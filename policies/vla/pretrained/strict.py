"""Strict loading: every checkpoint tensor is used and every parameter is filled.

A format's loader maps the checkpoint's keys onto ours (`origin` {our name: checkpoint key})
and names the tensors it consumed without placing them (`consumed`, each with its reason: a head tied
to the embeddings, a vocabulary head the reference model never reads). `fill` then checks
  - every checkpoint tensor was mapped or consumed (else: the first unexpected key, and the count);
  - every entry of the policy's state dict was filled, apart from the names under `fresh`
    (heads the reference model does not have, e.g. the RL noise head and the critic, and the
    normalisation buffers that norm_stats.py sets) (else: the first missing key, and the count);
  - every shape matches (else: the first mismatched key with both shapes);
and copies the tensors in one at a time, cast to the policy's dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from policies.vla.pretrained.files import PretrainedError


@dataclass
class LoadReport:
    """What a strict load did: counts of tensors and parameters, and what was left fresh."""

    source_tensors: int = 0
    filled: int = 0  # state-dict entries copied from the checkpoint
    filled_numel: int = 0
    consumed: dict[str, str] = field(default_factory=dict)  # checkpoint key -> why it is not placed
    fresh: list[str] = field(default_factory=list)  # our entries not in the reference model

    def summary(self) -> str:
        fresh = sum(1 for _ in self.fresh)
        return (f"{self.source_tensors} checkpoint tensors: {self.filled} placed "
                f"({self.filled_numel:,} values), {len(self.consumed)} consumed unplaced; "
                f"{fresh} entries of ours start fresh")


def fill(module: nn.Module, source: Mapping[str, torch.Tensor], shapes: dict[str, tuple[int, ...]],
         origin: dict[str, str], consumed: dict[str, str], fresh: tuple[str, ...], where: str) -> LoadReport:
    """Copy the checkpoint into `module` strictly (see the module doc).

    source: checkpoint key -> tensor (read lazily, one at a time: files.LazyTensors); shapes:
    checkpoint key -> shape; origin: our name -> the checkpoint key it comes from; consumed:
    checkpoint keys used without being placed; fresh: prefixes of our names that start fresh.
    """
    placed = set(origin.values()) | set(consumed)
    unexpected = [k for k in shapes if k not in placed]
    if unexpected:
        raise PretrainedError(f"{where}: unexpected checkpoint key {unexpected[0]!r} "
                              f"({len(unexpected)} unexpected); the format's layout does not use it")
    own = module.state_dict()
    foreign = [k for k in origin if k not in own]
    if foreign:
        raise PretrainedError(f"{where}: unexpected checkpoint key {origin[foreign[0]]!r} "
                              f"({len(foreign)} unexpected); it maps to {foreign[0]!r}, which this model lacks")
    missing = [k for k in own if k not in origin and not k.startswith(fresh)]
    if missing:
        raise PretrainedError(f"{where}: missing checkpoint key for {missing[0]!r} ({len(missing)} missing); "
                              "every parameter of the reference architecture must come from the checkpoint")
    for k, src in origin.items():
        if tuple(shapes[src]) != tuple(own[k].shape):
            raise PretrainedError(f"{where}: wrong shape for {src!r}: checkpoint {tuple(shapes[src])}, "
                                  f"model {tuple(own[k].shape)} ({k})")
    with torch.no_grad():
        for k, src in origin.items():
            own[k].copy_(source[src].to(own[k].dtype))
    return LoadReport(source_tensors=len(shapes), filled=len(origin),
                      filled_numel=sum(own[k].numel() for k in origin), consumed=dict(consumed),
                      fresh=[k for k in own if k not in origin])
