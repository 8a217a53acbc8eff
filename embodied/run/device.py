"""One device setting for every path that runs a policy or a learner.

`train.device` (read by `embodied train` and its roles, and by `embodied eval` among its overrides;
`device` of `embodied sft` and `world-model train`, `learner.device` of `finetune-robot`, `--device` of
`sim2real` and `serve`; docs/gpu.md) takes:
  auto     the current CUDA device when torch sees one, else the CPU
  cpu      the CPU
  cuda     the current CUDA device (cuda:0 unless CUDA_VISIBLE_DEVICES / Ray says otherwise)
  cuda:N   CUDA device N
A role on Ray resolves `auto` and `cuda` to the GPU Ray gave it (Ray sets CUDA_VISIBLE_DEVICES
for the actor, so that GPU is cuda:0 inside it).

Precision (`autocast`): VLA forwards and learner steps run under bf16 autocast on CUDA (the weights
stay float32, so the optimiser's state and updates are float32); the RL arithmetic on log-probs
(ratios, KL, the chain's Gaussian log-densities) is float32: policies return float32 log-probs and
the learner casts before the ratio. MLP / CNN policies and everything on the CPU run in float32:
bf16 there costs accuracy and buys nothing measurable at their size.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

import torch

DEVICES = "auto, cpu, cuda, cuda:N"


class DeviceError(ValueError):
    """A bad device setting; the message is one line."""


def flat_device_key(raw: dict[str, Any]) -> dict[str, Any]:
    """A flat config (sft, world-model) given `train.device` / `train: {device: ...}`, as `embodied
    train` spells it, gets it as its own `device` key."""
    train = raw.get("train")
    if isinstance(train, dict) and set(train) == {"device"}:
        raw = {k: v for k, v in raw.items() if k != "train"}
        raw["device"] = train["device"]
    return raw


def check_device(spec: Any, field: str = "train.device") -> str:
    """The setting as a string if it has an allowed form (no CUDA needed); DeviceError otherwise."""
    s = str(spec).strip().lower() if spec is not None else ""
    if s in ("auto", "cpu", "cuda"):
        return s
    if s.startswith("cuda:") and s[5:].isdigit():
        return s
    raise DeviceError(f"{field}: {spec!r} is not a device; allowed: {DEVICES}")


def resolve_device(spec: Any = "auto", field: str = "train.device") -> torch.device:
    """torch.device for a setting; DeviceError (one line) when it names a CUDA device that is not there."""
    s = check_device(spec, field)
    if s == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if s == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceError(f"{field}: {spec!r} but torch sees no CUDA device here; use cpu or auto")
    index = torch.cuda.current_device() if s == "cuda" else int(s[5:])
    if index >= torch.cuda.device_count():
        raise DeviceError(f"{field}: {spec!r} but only {torch.cuda.device_count()} CUDA device(s) are visible")
    return torch.device("cuda", index)


def uses_bf16(policy: Any, device: torch.device) -> bool:
    """bf16 autocast for VLA policies on CUDA; float32 for everything else (see the module doc)."""
    return device.type == "cuda" and getattr(policy, "is_vla", False)


@contextlib.contextmanager
def autocast(device: torch.device, enabled: bool) -> Iterator[None]:
    """bf16 autocast on `device` when enabled, else nothing."""
    if not enabled:
        yield
        return
    with torch.autocast(device.type, dtype=torch.bfloat16):
        yield


def to_device(tree: Any, device: torch.device) -> Any:
    """Tensors of a dict / list / tuple / dataclass tree moved to device (no copy when already there)."""
    if torch.is_tensor(tree):  # asynchronous only towards CUDA: a device-to-host copy must complete before use
        return tree.to(device, non_blocking=device.type == "cuda")
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):  # StepResult, ChunkStepResult, ...
        return dataclasses.replace(tree, **{f.name: to_device(getattr(tree, f.name), device)
                                            for f in dataclasses.fields(tree) if f.init})
    if isinstance(tree, dict):
        return {k: to_device(v, device) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)) and any(torch.is_tensor(v) for v in tree):
        return type(tree)(to_device(v, device) for v in tree)
    return tree


def to_env(actions: torch.Tensor, env_device: torch.device) -> torch.Tensor:
    """Actions for the env, on its device: a no-op for an env on the policy's device (ManiSkill on
    physx_cuda), the one host copy per step for a CPU simulator (MuJoCo, LIBERO, ManiSkill on the CPU)."""
    return actions.to(env_device, non_blocking=env_device.type == "cuda")  # a copy to the host must block


def policy_act(policy: Any, obs: dict[str, Any], deterministic: bool = True) -> Any:
    """policy.act on its own device and precision, for the one-observation paths (serve, the
    robot in sim2real): obs are moved there; the caller takes the actions back with .cpu()."""
    device = module_device(policy)
    with torch.no_grad(), autocast(device, uses_bf16(policy, device)):
        return policy.act(to_device(obs, device), deterministic=deterministic)


def module_device(module: Any) -> torch.device:
    """Where a module's parameters are; the CPU for a module without any, or for an object that
    only acts like a policy (a wrapper over roles) unless it says otherwise with `.device`."""
    if not isinstance(module, torch.nn.Module):
        return torch.device(getattr(module, "device", None) or "cpu")
    for p in module.parameters():
        return p.device
    return torch.device("cpu")
