"""What both VLA policies share: the prefix backbone, the instruction tokenizer,
state / action normalisation buffers, the critic, and persistence with tokenizer files.

Normalisation: `set_stats(dataset.stats)` stores per-dimension mean / std of state [S] and
actions [A] as buffers (saved with the weights); x_norm = (x - mean) / max(std, 1e-2).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from policies.base import Policy, load_weights
from policies.normalizer import RunningNormalizer
from policies.vla.config import VLAConfig
from policies.vla.prefix import TextTokenizer, VisionLanguagePrefix, build_lm, build_vision

MIN_STD = 1e-2


class Stats(nn.Module):
    """Per-dimension mean / std buffers [D]."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def set(self, mean: Any, std: Any, min_std: float = MIN_STD) -> None:
        """mean / std [D]; std is clamped to min_std (a released checkpoint's exact centre and
        scale are set with min_std=0: policies/vla/pretrained/norm_stats.py)."""
        mean, std = torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(std, dtype=torch.float32)
        if mean.shape != self.mean.shape or std.shape != self.std.shape:
            raise ValueError(f"stats: expected mean/std of shape {tuple(self.mean.shape)}, "
                             f"got {tuple(mean.shape)} / {tuple(std.shape)}")
        if not bool((std.clamp(min=min_std) > 0).all()) or not bool(torch.isfinite(mean).all() & torch.isfinite(std).all()):
            raise ValueError("stats: std must be finite and > 0, mean finite")
        self.mean.copy_(mean)
        self.std.copy_(std.clamp(min=min_std))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() - self.mean) / self.std

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() * self.std + self.mean


class VLAPolicy(Policy):
    """Base of FlowVLA and ARVLA. Subclasses set `causal_lm`, `marker` and `extra_vocab()`."""

    causal_lm = False
    marker = False

    def __init__(self, config: VLAConfig, _source_dir: str | Path | None = None):
        super().__init__(config)
        self.chunk_size = config.chunk_size
        self.tokenizer = TextTokenizer(config, _source_dir)
        self.text_vocab = self.tokenizer.vocab_size
        lm = build_lm(config, self.text_vocab + self.extra_vocab(), self.causal_lm)
        self.prefix = VisionLanguagePrefix(config, build_vision(config), lm, marker=self.marker)
        self.state_stats, self.action_stats = Stats(config.state_dim), Stats(config.action_dim)
        self._build_critic()
        if config.lora_rank > 0:  # adapters are part of the architecture, so checkpoints reload them
            from policies.vla.lora import apply_lora

            apply_lora(self.prefix, config.lora_rank, config.lora_alpha or None)

    def _build_critic(self) -> None:
        cfg = self.config
        self.critic, self.critic_norm = None, None
        out = cfg.executed_len if cfg.critic_per_action else 1
        if cfg.critic and cfg.critic_obs == "privileged":  # asymmetric: the simulator's state
            h = cfg.critic_hidden
            self.critic_norm = RunningNormalizer(cfg.privileged_dim)
            self.critic = nn.Sequential(nn.Linear(cfg.privileged_dim, h), nn.Tanh(), nn.Linear(h, h),
                                        nn.Tanh(), nn.Linear(h, out))
        elif cfg.critic:
            self.critic = nn.Sequential(nn.Linear(self.prefix.width, cfg.critic_hidden), nn.Tanh(),
                                        nn.Linear(cfg.critic_hidden, out))
        if self.critic is not None:
            self.critic.to(self.device)
        self.has_critic = self.critic is not None

    def reset_critic(self, critic_obs: str, privileged_dim: int = 0, per_action: bool = False) -> None:
        """A fresh value head reading `critic_obs` (SFT never trains the critic, so RL may pick
        its input): "prefix" or "privileged" (obs['privileged'] of width privileged_dim).
        per_action: one value per executed action of the chunk (action-level rewards)."""
        self.config.critic, self.config.critic_obs = True, critic_obs
        self.config.privileged_dim, self.config.critic_per_action = privileged_dim, per_action
        self.config.__post_init__()
        self._build_critic()

    def extra_vocab(self) -> int:
        """Token ids appended after the text vocabulary (the AR policy's action bins)."""
        return 0

    # -- inputs ----------------------------------------------------------------
    def set_stats(self, stats: Mapping[str, Mapping[str, Any]]) -> None:
        """{"state": {"mean": [S], "std": [S]}, "action": {"mean": [A], "std": [A]}}."""
        self.state_stats.set(stats["state"]["mean"], stats["state"]["std"])
        self.action_stats.set(stats["action"]["mean"], stats["action"]["std"])

    def text(self, obs: dict[str, Any], batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Instruction ids int64 [B, L] and mask bool [B, L]."""
        texts = obs.get("instruction")
        if texts is None or len(texts) != batch:
            raise ValueError(f"obs['instruction']: expected a list of {batch} strings")
        ids, mask = self.tokenizer.batch(self.prompts(list(texts), obs), self.config.max_text_len)
        return ids.to(self.device), mask.to(self.device)

    def prompts(self, texts: list[str], obs: dict[str, Any]) -> list[str]:
        """The instructions through config.prompt_template (see VLAConfig)."""
        template = self.config.prompt_template
        if template == "{task}":
            return texts
        states = [""] * len(texts)
        if "{state}" in template:  # pi0.5: np.digitize(s, linspace(-1, 1, 257)[:-1]) - 1 per dim
            bins = torch.linspace(-1.0, 1.0, 257, dtype=torch.float64)[:-1]
            idx = torch.bucketize(self.padded_state(obs).double().cpu(), bins, right=True) - 1
            states = [" ".join(str(int(v)) for v in row) for row in idx]
        return [template.format(task=t, clean_task=t.strip().replace("_", " ").replace("\n", " "), state=s)
                for t, s in zip(texts, states)]

    def padded_state(self, obs: dict[str, Any]) -> torch.Tensor:
        """obs['state'] [B, S] -> normalised, zero-padded float [B, max_state_dim]."""
        raw = obs["state"].to(self.device)
        idx = self.config.state_indices
        raw = raw[:, idx] if idx else raw[:, :self.config.state_dim]
        s = self.state_stats.normalize(raw)
        return nn.functional.pad(s, (0, self.config.max_state_dim - s.shape[1]))

    def executed(self, actions: torch.Tensor) -> torch.Tensor:
        """Chunk [B, K, A] -> the part to execute [B, n, A] (receding horizon, `execute_steps`)."""
        n = self.config.execute_steps
        return actions[:, :n] if 0 < n < actions.shape[1] else actions

    def value_from(self, features: torch.Tensor | None, obs: dict[str, Any]) -> torch.Tensor | None:
        """Critic -> [B], or [B, n] with critic_per_action (None without a critic): on detached
        backbone features [B, D], or with critic_obs="privileged" on the normalised
        obs['privileged'] [B, P] (asymmetric critic)."""
        if self.critic is None:
            return None
        if self.critic_norm is not None:
            v = self.critic(self.critic_norm(obs["privileged"].to(self.device).float()))
        else:
            v = self.critic(features.detach().float())
        return v if self.config.critic_per_action else v.squeeze(-1)

    def update_normalizer(self, obs: dict[str, Any]) -> None:
        if self.critic_norm is not None and obs is not None and "privileged" in obs:
            self.critic_norm.update(obs["privileged"].float())

    def critic_parameters(self):
        return iter(()) if self.critic is None else self.critic.parameters()

    @property
    def device(self) -> torch.device:
        return self.state_stats.mean.device

    # -- persistence -------------------------------------------------------------
    def config_dict(self) -> dict[str, Any]:
        """The config with the architecture recorded and pretrained paths cleared, so a
        saved policy reloads from its own directory alone."""
        cfg = asdict(self.config)
        if cfg["pretrained_vision"] is not None:
            cfg["vision"] = _arch(self.prefix.vision.config.to_dict())
            cfg["pretrained_vision"] = None
        if cfg["pretrained_lm"] is not None:
            cfg["lm"] = _arch(self.prefix.lm_config.to_dict())
            cfg["lm_type"] = self.prefix.lm_config.model_type
            cfg["pretrained_lm"] = None
        return cfg

    def weights_to_save(self) -> dict[str, torch.Tensor]:
        return _untie(super().weights_to_save())

    def save_extras(self, path: Path) -> None:
        self.tokenizer.save(path)

    @classmethod
    def load_from(cls, path: Path, config: Any, state: dict[str, torch.Tensor]) -> "VLAPolicy":
        """Rebuild with the saved tokenizer, restore tied weights saved once (see _untie)."""
        policy = cls(config, _source_dir=path)
        load_weights(policy, policy.complete_state(state), str(path))
        return policy

    def complete_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Restore a head tied to the embeddings, which saving dropped (see _untie)."""
        state = dict(state)
        for k in set(self.state_dict()) - set(state):
            alias = _TIED.get(k)
            if alias is not None and alias in state:
                state[k] = state[alias]
        return state


_TIED = {"prefix.lm.lm_head.weight": "prefix.lm.model.embed_tokens.weight"}


def _untie(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage: drop a head tied to the embeddings (restored on load)."""
    for k, alias in _TIED.items():
        if k in state and alias in state and state[k].data_ptr() == state[alias].data_ptr():
            state = {n: v for n, v in state.items() if n != k}
    return state


def _arch(d: dict[str, Any]) -> dict[str, Any]:
    """A transformers config dict without bookkeeping keys, to rebuild the architecture."""
    drop = {"transformers_version", "architectures", "_name_or_path", "model_type", "torch_dtype",
            "dtype", "vision_config", "text_config", "id2label", "label2id"}
    return {k: v for k, v in d.items() if k not in drop}
