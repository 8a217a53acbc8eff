"""Policy classes by name, as "module:Class" strings imported on first use (so that the
baselines never load transformers), and the error of loading a policy. Imports nothing of
policies/: base.py resolves a saved policy's class here, registry.py builds one from a config.
A new policy class is one entry in POLICIES (and VLAS if it is a VLA)."""

from __future__ import annotations

import importlib

POLICIES: dict[str, str] = {
    "mlp": "policies.mlp:MLPActorCritic",
    "cnn": "policies.cnn:CNNActorCritic",
    "flow_vla": "policies.vla.flow:FlowVLA",
    "ar_vla": "policies.vla.autoregressive:ARVLA",
    "oft_vla": "policies.vla.pretrained.oft_policy:OFTVLA",  # OpenVLA-OFT's L1 head (docs/vla.md)
}
VLAS = ("flow_vla", "ar_vla", "oft_vla")


class PolicyLoadError(ValueError):
    """A policy directory or config that cannot be loaded; the message is one line."""


def policy_class(name: str) -> type:
    """The class registered as `name` (a policies.base.Policy subclass)."""
    if name not in POLICIES:
        raise PolicyLoadError(f"unknown policy '{name}'; allowed: {', '.join(sorted(POLICIES))}")
    module, cls = POLICIES[name].split(":")
    return getattr(importlib.import_module(module), cls)
