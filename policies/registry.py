"""Building a policy from a config plus an env spec (the classes by name: policies/names.py)."""

from __future__ import annotations

from typing import Any

from policies.base import Policy, PolicyLoadError, check_fits
from policies.cnn import CNNActorCritic, CNNConfig
from policies.configs import OVERRIDES
from policies.mlp import MLPActorCritic, MLPConfig
from policies.names import POLICIES, VLAS, policy_class

__all__ = ["POLICIES", "VLAS", "policy_class", "build_policy", "build_mlp"]


def build_mlp(cfg: Any, spec: Any) -> MLPActorCritic:
    """A fresh MLP, or with cfg.init_from the save_pretrained MLP there (e.g. embodied.imitation.bc's
    behaviour cloning), whose own config then replaces hidden_sizes, activation and the rest."""
    obs_dim = spec.privileged_dim if cfg.obs_key == "privileged" else spec.state_dim
    if cfg.init_from:
        policy = MLPActorCritic.from_pretrained(cfg.init_from)
        got = (policy.config.obs_key, policy.config.obs_dim, policy.config.action_dim)
        if got != (cfg.obs_key, obs_dim, spec.action_dim):
            raise PolicyLoadError(f"policy.init_from: {cfg.init_from} reads {got[0]} [{got[1]}] and acts [{got[2]}]; "
                                  f"the env gives {cfg.obs_key} [{obs_dim}] and takes [{spec.action_dim}]")
        return policy
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


def build_vla(cfg: Any, spec: Any, per_action_value: bool = False) -> Policy:
    """A VLA from cfg.init_from (a save_pretrained directory), with the non-null keys of its
    own section (OVERRIDES of policies/configs.py: flow's num_steps, noise_*; AR's temperature,
    greedy) and execute_steps overriding the saved config; a fresh value head on cfg.critic_obs
    (one value per executed action with per_action_value)."""
    own = OVERRIDES.get(cfg.name, ())
    for other, keys in OVERRIDES.items():  # set on the object by hand (the loader refuses them in a file)
        wrong = [k for k in keys if k not in own and getattr(cfg, k, None) is not None]
        if wrong:
            raise PolicyLoadError(f"policy.{wrong[0]} applies to {other} only, not policy.name={cfg.name}; "
                                  "remove it or set it to null")
    if not cfg.init_from:
        raise PolicyLoadError(f"policy.init_from: {cfg.name} starts from a save_pretrained directory "
                              "(e.g. the 'final' directory of `embodied sft`)")
    overrides = {k: getattr(cfg, k) for k in (*own, "execute_steps") if getattr(cfg, k) is not None}
    try:
        policy = policy_class(cfg.name).from_pretrained(cfg.init_from, **overrides)
    except PolicyLoadError:
        raise
    except ValueError as e:  # a config field out of range
        raise PolicyLoadError(f"policy: {e}") from None
    if policy.name != cfg.name:
        raise PolicyLoadError(f"policy.init_from: {cfg.init_from} holds a {policy.name}, not a {cfg.name}")
    if cfg.critic_obs is not None:
        policy.reset_critic(cfg.critic_obs, spec.privileged_dim, per_action=per_action_value)
    if cfg.freeze == "vlm" and cfg.name != "flow_vla":
        raise PolicyLoadError("policy.freeze=vlm applies to flow_vla only (the AR policy's actions are LM tokens); "
                              "use none or vision")
    if cfg.lora_rank < 0:
        raise PolicyLoadError(f"policy.lora_rank: {cfg.lora_rank} must be >= 0 (0: no adapters)")
    if cfg.lora_rank and policy.config.lora_rank not in (0, cfg.lora_rank):
        raise PolicyLoadError(f"policy.lora_rank: {cfg.init_from} already holds rank-{policy.config.lora_rank} "
                              f"adapters, not {cfg.lora_rank}")
    from policies.vla.modes import ModeError, apply_modes

    try:  # adapters on the prefix, frozen modules, their dtype, checkpointing (docs/vla.md, training modes)
        apply_modes(policy, cfg.freeze, cfg.lora_rank, cfg.frozen_dtype, cfg.checkpointing)
    except ModeError as e:
        raise PolicyLoadError(f"policy.{e}") from None
    missing = [c for c in policy.config.cameras if c not in spec.cameras]
    if missing:
        raise PolicyLoadError(f"env.cameras: the policy reads cameras {policy.config.cameras}; the env renders "
                              f"{list(spec.cameras)} (set env.obs_mode=rgb and env.cameras)")
    return policy


BUILDERS = {"mlp": build_mlp, "cnn": build_cnn}  # the VLAs: build_vla


def build_policy(cfg: Any, spec: Any, per_action_value: bool = False) -> Policy:
    """A fresh policy for `cfg` (its section of policies/configs.py) on an env with EnvSpec `spec`.
    per_action_value: the VLA critic predicts one value per executed action (chunk-1 policies'
    single value already is one)."""
    policy = build_vla(cfg, spec, per_action_value) if cfg.name in VLAS else BUILDERS[cfg.name](cfg, spec)
    if getattr(cfg, "init_from", None):  # trained on another task (its config.json's record), or other shapes
        check_fits(policy, spec, f"policy.init_from: {cfg.init_from}")
    return policy
