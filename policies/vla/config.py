"""Configs of the VLA policies and their presets.

A config is a plain dataclass stored in the checkpoint's config.json. `vision` holds
`transformers.SiglipVisionConfig` keyword arguments and `lm` the keyword arguments of the
decoder LM's config (`lm_type` picks it: "llama", "qwen2", "gemma", ...). To start from
real weights on disk, set `pretrained_vision` (a SigLIP checkpoint directory) and / or
`pretrained_lm` (a Llama / Qwen2 / Gemma directory, whose tokenizer is then used); they
are read with `local_files_only=True`, nothing is downloaded. save_pretrained records
the loaded architecture in `vision` / `lm` and clears these paths, so a saved policy
needs only its own directory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def _tiny_vision() -> dict[str, Any]:
    return {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 2, "image_size": 64, "patch_size": 16}


def _tiny_lm() -> dict[str, Any]:
    return {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}


@dataclass
class VLAConfig:
    """What both VLA policies share: inputs, backbone, padding widths, critic."""

    action_dim: int = 4  # A: real action width
    state_dim: int = 9  # S: real proprioception width
    chunk_size: int = 4  # K: actions per chunk
    execute_steps: int = 0  # act returns the first n actions of each chunk (receding horizon); 0 = all K
    max_state_dim: int = 32  # state padded to this width (zeros, masked)
    max_action_dim: int = 32  # actions padded to this width (flow policy)
    cameras: list[str] = field(default_factory=lambda: ["front"])  # obs keys rgb_<cam>
    max_text_len: int = 16  # instruction tokens incl. [BOS]/[EOS]; longer ones are cut
    instructions: list[str] = field(default_factory=list)  # extra corpus for the word tokenizer
    vision: dict[str, Any] = field(default_factory=_tiny_vision)  # SiglipVisionConfig kwargs
    lm_type: str = "llama"  # transformers model_type of the decoder LM
    lm: dict[str, Any] = field(default_factory=_tiny_lm)  # LM config kwargs (vocab_size is set for you)
    pretrained_vision: str | None = None  # local SigLIP directory
    pretrained_lm: str | None = None  # local LM directory (its tokenizer is used)
    critic: bool = True  # a value head (never trained by SFT; RL's PPO trains it)
    critic_hidden: int = 64
    critic_obs: str = "prefix"  # "prefix": detached pooled backbone features; "privileged": the sim's state
    privileged_dim: int = 0  # width of obs['privileged'] for critic_obs="privileged" (set by the RL builder)
    critic_per_action: bool = False  # one value per executed action of the chunk (ppo.reward_level=action)
    # Inputs as a released checkpoint expects them (policies/vla/pretrained/, docs/vla.md):
    state_indices: list[int] = field(default_factory=list)  # obs['state'] dims fed, in order; [] = the first state_dim
    # the text tokenised: {task} the instruction, {clean_task} it stripped with "_" and newlines as
    # spaces, {state} the normalised padded state in 256 bins over [-1, 1] (pi0.5); pi0: "{task}\n"
    prompt_template: str = "{task}"
    prefix_attention: str = "causal"  # "causal" or "bidirectional" (pi0's prefix: every real token sees every other)
    pixel_shuffle: int = 0  # > 0: SmolVLM's connector (s x s patches per token, bias-free Linear) as the projector
    embed_scale: bool = False  # image and text embeddings times sqrt(LM width) (SmolVLA)
    # patch positions: "exact" (row-major 0..P-1, SigLIP) or "idefics_4x": SmolVLM's as transformers 4.x computes
    # them, bucketize(i / n * (1 - 1e-6)), which shifts every row and column but the first down by one (SmolVLA)
    vision_position_ids: str = "exact"
    lora_rank: int = 0  # > 0: rank-r adapters on the prefix's attention projections, the rest of it frozen
    lora_alpha: float = 0.0  # adapter scale alpha / r; 0 = alpha equal to the rank

    @property
    def executed_len(self) -> int:
        """n: actions of each chunk that act returns (execute_steps, or all K)."""
        return self.execute_steps if 0 < self.execute_steps < self.chunk_size else self.chunk_size

    def __post_init__(self) -> None:
        if self.critic_obs not in ("prefix", "privileged"):
            raise ValueError(f"critic_obs: {self.critic_obs!r} is not allowed; choose prefix or privileged")
        if self.critic and self.critic_obs == "privileged" and self.privileged_dim < 1:
            raise ValueError("privileged_dim: critic_obs=privileged needs the width of obs['privileged']")
        if self.lora_rank < 0:
            raise ValueError(f"lora_rank: {self.lora_rank} must be >= 0 (0: no adapters)")
        if self.vision_position_ids not in ("exact", "idefics_4x"):
            raise ValueError(f"vision_position_ids: {self.vision_position_ids!r} is not allowed; choose exact or idefics_4x")
        if self.prefix_attention not in ("causal", "bidirectional"):
            raise ValueError(f"prefix_attention: {self.prefix_attention!r} is not allowed; choose causal or bidirectional")
        try:
            self.prompt_template.format(task="", clean_task="", state="")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"prompt_template: {self.prompt_template!r} is not a template of {{task}}, "
                             f"{{clean_task}} and {{state}} ({e})") from None
        if self.state_indices and len(self.state_indices) != self.state_dim:
            raise ValueError(f"state_indices: {len(self.state_indices)} indices for state_dim {self.state_dim}; "
                             "give one env state index per policy state dimension")


@dataclass
class FlowVLAConfig(VLAConfig):
    """pi0-style flow matching: an action expert reads the prefix KV cache."""

    expert_hidden: int = 64
    expert_intermediate: int = 128
    num_steps: int = 10  # N Euler steps from t=1 (noise) to t=0 (actions)
    time_min_period: float = 4e-3  # sinusoidal time embedding periods
    time_max_period: float = 4.0
    # Exploration of act(deterministic=False), for RL (policies/vla/exploration.py):
    noise_method: str = "ode"  # "ode" (noise only at the start), "flow_noise" or "flow_sde"
    noise_std_min: float = 0.08  # Flow-Noise: bounds of the learned per-step std (pi_RL)
    noise_std_max: float = 0.16
    sde_noise_level: float = 0.5  # Flow-SDE: a in g_t = a * sqrt(t / (1 - t))
    expert_arch: str = "toolkit"  # "toolkit", "gemma" (pi0), "gemma_ada" (pi0.5) or "smolvla" (policies/vla/expert*.py)
    state_in_prefix: bool = False  # the state as a prefix token after the instruction (SmolVLA), not an expert token

    def __post_init__(self) -> None:
        super().__post_init__()
        from policies.vla.expert import ARCHS
        from policies.vla.exploration import METHODS

        if self.expert_arch not in ARCHS:
            raise ValueError(f"expert_arch: {self.expert_arch!r} is not allowed; choose one of {', '.join(ARCHS)}")

        if self.noise_method not in METHODS:
            raise ValueError(f"noise_method: {self.noise_method!r} is not allowed; choose one of {', '.join(METHODS)}")
        if not 0.0 < self.noise_std_min <= self.noise_std_max:
            raise ValueError(f"noise_std_min/noise_std_max: need 0 < min <= max, got {self.noise_std_min}, {self.noise_std_max}")
        if self.sde_noise_level <= 0.0:
            raise ValueError(f"sde_noise_level: must be > 0, got {self.sde_noise_level}")


@dataclass
class ARVLAConfig(VLAConfig):
    """OpenVLA-style: each action dimension is one of `num_bins` tokens at the vocabulary's end."""

    num_bins: int = 256
    temperature: float = 1.0  # sampling temperature when deterministic=False
    # SFT target: 0 = one-hot cross-entropy (OpenVLA); > 0 = a Gaussian of this width in bins
    # around the demonstrated bin (HL-Gauss, Farebrother et al. 2024), so near misses cost less
    label_sigma: float = 0.0
    state_token: bool = True  # the proprioceptive state as one prefix token (False: images + text only)
    # deterministic act: each token is the most likely bin ("argmax", OpenVLA), the bin nearest
    # the distribution's mean ("mean"; steadier when wide label_sigma targets flatten the peak) or
    # the peak of a parabola fitted to the log-probs ("vertex"; steady, and not pulled inwards at
    # the ends of the range as the mean is)
    greedy: str = "argmax"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.label_sigma < 0:
            raise ValueError(f"label_sigma: {self.label_sigma} must be >= 0 (0: one-hot targets)")
        if self.greedy not in ("argmax", "mean", "vertex"):
            raise ValueError(f"greedy: {self.greedy!r} is not one of 'argmax', 'mean', 'vertex'")


PRESETS: dict[str, dict[str, Any]] = {
    # Trains on 2 CPU cores in minutes from 64x64 images.
    "tiny": {},
    # Real-size: SigLIP so400m-sized tower + a Qwen2/Gemma/Llama LM read from local directories
    # (set pretrained_vision / pretrained_lm to your paths; see docs/vla.md).
    "siglip-qwen2": {"vision": {"image_size": 224, "patch_size": 14}, "lm_type": "qwen2",
                     "max_text_len": 48, "pretrained_vision": "/path/to/siglip",
                     "pretrained_lm": "/path/to/qwen2", "critic_hidden": 256},
}


def make_config(cls: type, preset: str = "tiny", **overrides: Any) -> Any:
    """`cls` (FlowVLAConfig / ARVLAConfig) from a preset name plus field overrides."""
    if preset not in PRESETS:
        raise ValueError(f"unknown VLA preset {preset!r}; allowed: {', '.join(PRESETS)}")
    names = {f.name for f in dataclasses.fields(cls)}
    merged = {**PRESETS[preset], **overrides}
    bad = sorted(set(merged) - names)
    if bad:
        raise ValueError(f"unknown {cls.__name__} fields {bad}; allowed: {', '.join(sorted(names))}")
    return cls(**merged)
