"""Policy classes by name, and building one from a config plus an env spec."""

from __future__ import annotations

from typing import Any

import importlib

from policies.base import Policy, PolicyLoadError
from policies.cnn import CNNActorCritic, CNNConfig
from policies.mlp import MLPActorCritic, MLPConfig

# name -> "module:Class"; imported on first use, so the baselines never load transformers.
POLICIES: dict[str, str] = {
    "mlp": "policies.mlp:MLPActorCritic",
    "cnn": "policies.cnn:CNNActorCritic",
    "flow_vla": "policies.vla.flow:FlowVLA",
    "ar_vla": "policies.vla.autoregressive:ARVLA",
}


def policy_class(name: str) -> type[Policy]:
    if name not in POLICIES:
        raise PolicyLoadError(f"unknown policy '{name}'; allowed: {', '.join(sorted(POLICIES))}")
    module, cls = POLICIES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_mlp(cfg: Any, spec: Any) -> MLPActorCritic:
    obs_dim = spec.privileged_dim if cfg.obs_key == "privileged" else spec.state_dim
    return MLPActorCritic(MLPConfig(
        obs_dim=obs_dim, action_dim=spec.action_dim, obs_key=cfg.obs_key,
        hidden_sizes=list(cfg.hidden_sizes), activation=cfg.activation,
        init_log_std=cfg.init_log_std, normalize_obs=cfg.normalize_obs,
    ))


def build_cnn(cfg: Any, spec: Any) -> CNNActorCritic:
    if not spec.cameras:
        raise PolicyLoadError("policy.name=cnn needs camera observations; set env.obs_mode=rgb")
    return CNNActorCritic(CNNConfig(
        state_dim=spec.state_dim, action_dim=spec.action_dim, cameras=list(spec.cameras),
        image_size=spec.image_size[0], hidden_sizes=list(cfg.hidden_sizes),
        activation=cfg.activation, init_log_std=cfg.init_log_std, normalize_obs=cfg.normalize_obs,
    ))


BUILDERS = {"mlp": build_mlp, "cnn": build_cnn}


def build_policy(cfg: Any, spec: Any) -> Policy:
    """A fresh policy for `cfg` (embodied.config.PolicyConfig) on an env with EnvSpec `spec`."""
    return BUILDERS[cfg.name](cfg, spec)
