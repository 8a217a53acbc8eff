"""The `policy:` section of an experiment config: one dataclass per policy, picked by `name`
(the names of policies/names.py). Each holds only the keys its policy reads, so the config
loader refuses any other key in one line naming the policy and what it allows
(embodied/config_loader.py, `variants`). `PolicyConfig(name="flow_vla", num_steps=4)` builds
the flow VLA's class. Imports nothing heavy (no torch): the CLI and the config load it.

    mlp        MLPPolicyConfig      a Gaussian MLP actor-critic, fresh (or init_from a saved MLP)
    cnn        CNNPolicyConfig      a CNN actor-critic on the cameras, fresh
    flow_vla   FlowVLAPolicyConfig  the flow-matching VLA, from a save_pretrained directory
    ar_vla     ARVLAPolicyConfig    the autoregressive VLA, from a save_pretrained directory
    oft_vla    OFTVLAPolicyConfig   OpenVLA-OFT's L1 head, from a save_pretrained directory

A key the VLAs take as null keeps the checkpoint's value (policies/registry.py build_vla).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal


@dataclass
class PolicyConfig:
    """What every policy's section has: its name and the save_pretrained directory it starts
    from. Calling PolicyConfig(name=N, ...) builds N's class (POLICY_CONFIGS)."""

    name: str = "mlp"
    init_from: str | None = None  # a save_pretrained directory (VLAs: required; MLP: e.g. behaviour cloning's)
    variant_key: ClassVar[str] = "name"  # the key whose value picks the class (embodied/config_loader.py)

    def __new__(cls, *args: Any, **kwargs: Any) -> "PolicyConfig":
        if cls is PolicyConfig:
            cls = policy_config_class(kwargs.get("name", args[0] if args else "mlp"))
        return super().__new__(cls)

    @classmethod
    def variants(cls) -> dict[str, type]:
        return POLICY_CONFIGS


@dataclass
class GaussianPolicyConfig(PolicyConfig):
    """What the MLP and the CNN share: Gaussian actor-critics built fresh."""

    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    activation: Literal["tanh", "elu", "relu"] = "tanh"
    init_log_std: float = -0.5
    normalize_obs: bool = True


@dataclass
class MLPPolicyConfig(GaussianPolicyConfig):
    name: Literal["mlp"] = "mlp"
    obs_key: Literal["state", "privileged"] = "privileged"


@dataclass
class CNNPolicyConfig(GaussianPolicyConfig):
    name: Literal["cnn"] = "cnn"


@dataclass
class VLAPolicyConfig(PolicyConfig):
    """What the three VLAs share: loaded from init_from, then RL's settings."""

    execute_steps: int | None = None  # actions of each chunk executed per policy step (0 = all K)
    critic_obs: Literal["prefix", "privileged"] | None = None  # a fresh VLA value head on this input
    freeze: Literal["none", "vision", "vlm"] = "none"  # weights RL leaves alone (vlm: flow only)
    lora_rank: int = 0  # > 0 trains rank-r adapters on the prefix's attention instead of the prefix (docs/vla.md)
    frozen_dtype: Literal["float32", "bfloat16"] = "float32"  # the frozen weights' dtype (docs/vla.md, training modes)
    checkpointing: bool = False  # recompute the vision tower's, LM's and expert's activations in the backward


@dataclass
class FlowVLAPolicyConfig(VLAPolicyConfig):
    name: Literal["flow_vla"] = "flow_vla"
    num_steps: int | None = None  # denoising steps
    noise_method: Literal["ode", "flow_noise", "flow_sde"] | None = None  # exploration
    noise_std_min: float | None = None  # flow_noise: bounds of the learned std
    noise_std_max: float | None = None
    sde_noise_level: float | None = None  # flow_sde: a in g_t = a sqrt(t / (1 - t))


@dataclass
class ARVLAPolicyConfig(VLAPolicyConfig):
    name: Literal["ar_vla"] = "ar_vla"
    temperature: float | None = None  # sampling temperature (log-probs are taken under it)
    greedy: Literal["argmax", "mean", "vertex"] | None = None  # how the deterministic (evaluation) act picks bins


@dataclass
class OFTVLAPolicyConfig(VLAPolicyConfig):
    name: Literal["oft_vla"] = "oft_vla"


POLICY_CONFIGS: dict[str, type] = {c.name: c for c in (MLPPolicyConfig, CNNPolicyConfig, FlowVLAPolicyConfig,
                                                        ARVLAPolicyConfig, OFTVLAPolicyConfig)}
# the keys of the VLA loaders' overrides (build_vla): the saved config's value unless set
OVERRIDES: dict[str, tuple[str, ...]] = {
    name: tuple(f.name for f in dataclasses.fields(cls) if f.name not in {g.name for g in dataclasses.fields(
        VLAPolicyConfig)}) for name, cls in POLICY_CONFIGS.items() if issubclass(cls, VLAPolicyConfig)}


def policy_config_class(name: str) -> type:
    """The section class of policy `name`; ValueError naming the allowed ones otherwise."""
    if name not in POLICY_CONFIGS:
        raise ValueError(f"policy.name: {name!r} is not allowed; choose one of {', '.join(POLICY_CONFIGS)}")
    return POLICY_CONFIGS[name]


def every_policy_key() -> set[str]:
    """The keys some policy's section has (the single PolicyConfig of older versions held them all)."""
    return {f.name for cls in POLICY_CONFIGS.values() for f in dataclasses.fields(cls)}
