"""Reading an OpenVLA-OFT directory's files (policies/vla/pretrained/oft.py): the VLA's safetensors
(one file or shards with their index), OFT's `<name>--*.pt` components (DDP state dicts) and PEFT's
LoRA adapter, each failure a one-line PretrainedError. Tensors are read lazily, one at a time."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch

from policies.vla.pretrained.files import LazyTensors, PretrainedError, read_json


class Sources(Mapping):
    """Every tensor of the checkpoint by name (weights, head, projector), read lazily; `shapes` from headers."""

    def __init__(self) -> None:
        self.get: dict[str, Callable[[], torch.Tensor]] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}

    def add_file(self, tensors: Mapping, prefix: str = "") -> None:
        for k in tensors:
            shape = tensors.shapes[k] if hasattr(tensors, "shapes") else tuple(tensors[k].shape)
            self.get[prefix + k], self.shapes[prefix + k] = (lambda t=tensors, k=k: t[k]), tuple(shape)

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.get[key]()

    def __iter__(self) -> Iterator[str]:
        return iter(self.get)

    def __len__(self) -> int:
        return len(self.get)


def model_weights(directory: Path, what: str) -> Sources | None:
    """model.safetensors or its shards (model.safetensors.index.json); None if neither is there."""
    out = Sources()
    if (directory / "model.safetensors").is_file():
        out.add_file(LazyTensors(directory / "model.safetensors", what))
        return out
    index = directory / "model.safetensors.index.json"
    if not index.is_file():
        return None
    weight_map = read_json(index, f"{what} shard index").get("weight_map", {})
    for shard in sorted(set(weight_map.values())):
        out.add_file(LazyTensors(directory / shard, what))
    return out


def component(directory: Path, name: str, required: bool) -> dict[str, torch.Tensor] | None:
    """The one `<name>--*.pt` file (a state dict, DDP's "module." prefix dropped)."""
    found = sorted(directory.glob(f"{name}--*.pt"))
    if len(found) > 1:
        raise PretrainedError(f"{directory}: {len(found)} {name}--*.pt files ({[p.name for p in found]}); keep one")
    if not found:
        if required:
            raise PretrainedError(f"{directory}: missing file {name}--*.pt (OFT's {name.replace('_', ' ')})")
        return None
    try:
        state = torch.load(found[0], map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for a truncated or foreign file
        raise PretrainedError(f"{found[0]}: corrupt checkpoint file: {str(e).splitlines()[0][:160]}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise PretrainedError(f"{found[0]}: not a state dict of tensors")
    return {k.removeprefix("module."): v for k, v in state.items()}


class Adapter:
    """PEFT's LoRA adapter: W += scale * B A per adapted Linear (scale alpha / r, or alpha / sqrt(r)
    with rsLoRA), in float32."""

    def __init__(self, directory: Path):
        cfg = read_json(directory / "adapter_config.json", "LoRA adapter config")
        where = directory / "adapter_config.json"
        if cfg.get("peft_type", "LORA") != "LORA":
            raise PretrainedError(f"{where}: peft_type {cfg.get('peft_type')!r}; only LORA adapters merge")
        for key, ok in (("use_dora", False), ("fan_in_fan_out", False), ("bias", "none"), ("modules_to_save", None),
                        ("rank_pattern", {}), ("alpha_pattern", {})):
            if cfg.get(key, ok) not in (ok, None) or (ok is None and cfg.get(key)):
                raise PretrainedError(f"{where}: {key} = {cfg.get(key)!r} is not supported; allowed: {ok!r}")
        r, alpha = int(cfg["r"]), float(cfg.get("lora_alpha", cfg["r"]))
        self.scale = alpha / (math.sqrt(r) if cfg.get("use_rslora") else r)
        self.tensors = LazyTensors(directory / "adapter_model.safetensors", "LoRA adapter weights")
        self.pairs: dict[str, tuple[str, str]] = {}
        for k in self.tensors:
            m = re.fullmatch(r"base_model\.model\.(.+)\.lora_([AB])(?:\.default)?\.weight", k)
            if m is None:
                raise PretrainedError(f"{directory / 'adapter_model.safetensors'}: unexpected adapter key {k!r}")
            a, b = self.pairs.get(m.group(1) + ".weight", ("", ""))
            self.pairs[m.group(1) + ".weight"] = (k, b) if m.group(2) == "A" else (a, k)
        half = [w for w, (a, b) in self.pairs.items() if not a or not b]
        if half:
            raise PretrainedError(f"{directory}: adapter for {half[0]!r} lacks its lora_A or lora_B ({len(half)} such)")

    def merged(self, key: str, weight: torch.Tensor) -> torch.Tensor:
        a, b = self.pairs[key]
        return (weight.float() + self.scale * (self.tensors[b].float() @ self.tensors[a].float())).to(weight.dtype)
