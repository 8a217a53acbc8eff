"""OFTVLA: OpenVLA-OFT's network (L1-regression variant) as a toolkit policy.

Shapes: B batch, C cameras, P patches per image, K chunk, A action width, M = K * A.

One LM forward predicts the whole chunk (parallel decoding). Each row is
    [t0][C * P image tokens][proprio token][prompt ids after t0][empty][M zero vectors][stop]
(t0: the prompt's first token, BOS for Llama; `empty`: Llama-2's "" token 29871 that OpenVLA's
prompts end with; `stop`: </s>). Attention is bidirectional over the real tokens, as OFT's
transformers fork makes Llama's; pads between the prompt and `empty` are masked out and position
ids count real tokens only, so a batch computes what OFT computes row by row.
The action tokens' inputs are zero vectors; the last hidden states at the M positions *before*
each action token (`empty` and the first M - 1 action tokens, OFT's training and inference
slice) are regrouped [B, K, A * D] and mapped by the L1 head to normalised actions [B, K, A].

Vision (oft_modules.FusedVision): DINOv2 (with registers) and SigLIP towers from transformers,
each image through both, features concatenated per patch and projected by OFT's 3-layer MLP.
Proprio: normalised (bounds: [low, high] -> [-1, 1], clipped) and projected to one token.

RL: OFT's head regresses one chunk, so token PPO has no token distribution to work with. For
PPO / GRPO `act` samples a Gaussian around the L1 mean in normalised action space,
std = exp(log_std) (one learned value per action dimension, `action_std_init` at start);
deterministic=True returns the L1 mean, i.e. OFT's own action. replay = {"sample": [B, K, A]};
log_prob_parts [B, n, A] are the executed actions' Gaussian log-densities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from policies.base import ActOutput, Evaluation, Policy
from policies.vla.common import Stats, VLAPolicy
from policies.vla.config import VLAConfig
from policies.vla.prefix import TextTokenizer, VisionLanguagePrefix, build_lm, masked_mean
from policies.vla.pretrained.oft_modules import FusedVision, L1Head, MLPProjector, ProprioProjector

_LOG_2PI = math.log(2.0 * math.pi)
OFT_PROMPT = "In: What action should the robot take to {task}?\nOut:"


def _tiny_dino() -> dict[str, Any]:
    return {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 1, "mlp_ratio": 2,
            "image_size": 28, "patch_size": 14, "num_register_tokens": 4}


def _tiny_siglip() -> dict[str, Any]:
    return {"hidden_size": 72, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 1,
            "image_size": 28, "patch_size": 14, "hidden_act": "gelu", "vision_use_head": False}


@dataclass
class OFTVLAConfig(VLAConfig):
    """OpenVLA-OFT's sizes and tokens. `dino` holds Dinov2WithRegistersConfig kwargs and `vision`
    SiglipVisionConfig kwargs; both towers hold the blocks OpenVLA reads (its released towers have
    one more, unread: policies/vla/pretrained/oft.py)."""

    dino: dict[str, Any] = field(default_factory=_tiny_dino)
    vision: dict[str, Any] = field(default_factory=_tiny_siglip)
    proprio: bool = True  # the state as one projected token after the image tokens
    head_blocks: int = 2  # residual blocks of the L1 head's MLP
    empty_token_id: int = 29871  # Llama-2's "" token, appended to the prompt
    stop_token_id: int = 2  # </s>, after the action tokens
    action_std_init: float = 0.1  # RL's Gaussian std at start (normalised action units)
    max_text_len: int = 64
    prompt_template: str = OFT_PROMPT
    prefix_attention: str = "bidirectional"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prefix_attention != "bidirectional":
            raise ValueError("prefix_attention: OpenVLA-OFT decodes in parallel with bidirectional attention; "
                             "set bidirectional")
        if self.action_std_init <= 0:
            raise ValueError(f"action_std_init: {self.action_std_init} must be > 0")
        if self.pixel_shuffle or self.embed_scale or self.vision_position_ids != "exact":
            raise ValueError("pixel_shuffle / embed_scale / vision_position_ids: not part of OpenVLA-OFT; leave "
                             "them at 0 / false / exact")


class OFTPrefix(VisionLanguagePrefix):
    """The fused towers, OFT's MLP projector and the Llama base model; `run` (bidirectional over
    real tokens, positions counting real tokens) is VisionLanguagePrefix's."""

    def __init__(self, cfg: OFTVLAConfig, lm: nn.Module):
        nn.Module.__init__(self)
        self.cfg, self.lm, self.marker = cfg, lm, None
        self.vision = FusedVision(cfg.dino, cfg.vision)
        self.image_size = self.vision.image_size
        self.projector = MLPProjector(self.vision.width, self.width)

    def image_tokens(self, obs: dict[str, Any]) -> torch.Tensor:
        """uint8 [B, H, W, 3] per camera -> projected patch tokens [B, C * P, D], cameras in order."""
        feats = [self.vision(obs[f"rgb_{cam}"]) for cam in self.cfg.cameras]
        return self.projector(torch.cat(feats, dim=1).to(self.projector.fc1.weight.dtype))


class OFTVLA(VLAPolicy):
    name = "oft_vla"
    config_class = OFTVLAConfig

    def __init__(self, config: OFTVLAConfig, _source_dir: str | Path | None = None):
        Policy.__init__(self, config)
        self.chunk_size = config.chunk_size
        self.tokenizer = TextTokenizer(config, _source_dir)
        self.text_vocab = self.tokenizer.vocab_size
        self.prefix = OFTPrefix(config, build_lm(config, self.text_vocab, causal_lm=False))
        vocab = self.prefix.lm.get_input_embeddings().num_embeddings
        for key in ("empty_token_id", "stop_token_id"):
            if not 0 <= getattr(config, key) < vocab:
                raise ValueError(f"{key}: {getattr(config, key)} is outside the LM's {vocab} tokens; give a "
                                 "Llama-style tokenizer directory or ids within its vocabulary")
        width = self.prefix.width
        self.proprio_proj = ProprioProjector(config.state_dim, width) if config.proprio else None
        self.head = L1Head(width, config.action_dim, config.head_blocks)
        self.log_std = nn.Parameter(torch.full((config.action_dim,), math.log(config.action_std_init)))
        self.state_stats, self.action_stats = Stats(config.state_dim), Stats(config.action_dim)
        self._build_critic()
        if config.lora_rank > 0:
            from policies.vla.lora import apply_lora

            apply_lora(self.prefix, config.lora_rank, config.lora_alpha or None)

    # -- inputs ------------------------------------------------------------------
    def prompts(self, texts: list[str], obs: dict[str, Any]) -> list[str]:
        """OpenVLA's prompt of the lower-cased instruction."""
        return [self.config.prompt_template.format(task=t.lower(), clean_task=t.lower(), state="") for t in texts]

    def proprio(self, obs: dict[str, Any]) -> torch.Tensor:
        """obs['state'] [B, S_env] -> the checkpoint's normalised proprio [B, S], clipped to [-1, 1]."""
        raw = obs["state"].to(self.device)
        idx = self.config.state_indices
        raw = raw[:, idx] if idx else raw[:, :self.config.state_dim]
        return self.state_stats.normalize(raw).clamp(-1.0, 1.0)

    def sequence(self, obs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Input embeddings [B, T, D], real-token mask bool [B, T] and the index of `empty`
        (the first of the M positions whose hidden states feed the head); layout in the module doc."""
        B = obs["state"].shape[0]
        ids, mask = self.text(obs, B)
        rows = [r[m].tolist() for r, m in zip(ids, mask)]
        rows = [r[1:-1] if len(r) > 1 and r[-1] == self.config.empty_token_id else r[1:] for r in rows]
        L = max(1, max(len(r) for r in rows))
        rest = torch.zeros(B, L, dtype=torch.long, device=self.device)
        rest_mask = torch.zeros(B, L, dtype=torch.bool, device=self.device)
        for i, r in enumerate(rows):
            rest[i, :len(r)] = torch.tensor(r, dtype=torch.long)
            rest_mask[i, :len(r)] = True
        embed = self.prefix.lm.get_input_embeddings()
        img = self.prefix.image_tokens(obs)
        dt = img.dtype
        special = torch.tensor([self.config.empty_token_id, self.config.stop_token_id], device=self.device)
        empty, stop = embed(special).to(dt)[:, None].unbind(0)  # [1, D] each
        parts = [embed(ids[:, :1]).to(dt), img]
        if self.proprio_proj is not None:
            w = self.proprio_proj.fc1.weight.dtype
            parts.append(self.proprio_proj(self.proprio(obs).to(w)).to(dt)[:, None])
        M = self.config.chunk_size * self.config.action_dim
        parts += [embed(rest).to(dt), empty.expand(B, 1, -1), img.new_zeros(B, M, img.shape[-1]), stop.expand(B, 1, -1)]
        at = sum(p.shape[1] for p in parts[:-3])
        ones = lambda n: torch.ones(B, n, dtype=torch.bool, device=self.device)  # noqa: E731
        mask = torch.cat([ones(at - L), rest_mask, ones(M + 2)], dim=1)
        return torch.cat(parts, dim=1), mask, at

    def forward_mean(self, obs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised action chunk [B, K, A] (the L1 head's output) and pooled features [B, D]."""
        embeds, mask, at = self.sequence(obs)
        hidden, _ = self.prefix.run(embeds, mask)
        M = self.config.chunk_size * self.config.action_dim
        h = hidden[:, at:at + M]  # [B, M, D]
        mean = self.head(h.reshape(h.shape[0], self.config.chunk_size, -1).float())
        return mean, masked_mean(hidden, mask)

    # -- Policy contract ---------------------------------------------------------------
    def _gauss(self, mean: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
        z = (sample - mean) * torch.exp(-self.log_std)
        return self.executed(-0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI)  # [B, n, A]

    def env_actions(self, sample: torch.Tensor) -> torch.Tensor:
        """Normalised chunk -> the executed part unnormalised with the checkpoint's statistics,
        clamped to [-1, 1] (the env contract) [B, n, A]."""
        return self.executed(self.action_stats.unnormalize(sample)).clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs: dict[str, Any], deterministic: bool = False) -> ActOutput:
        mean, feats = self.forward_mean(obs)
        sample = mean if deterministic else mean + torch.exp(self.log_std) * torch.randn_like(mean)
        parts = self._gauss(mean, sample)
        return ActOutput(self.env_actions(sample), parts.sum((1, 2)), self.value_from(feats, obs),
                         {"sample": sample}, parts)

    def evaluate(self, obs: dict[str, Any], replay: dict[str, torch.Tensor]) -> Evaluation:
        mean, feats = self.forward_mean(obs)
        parts = self._gauss(mean, replay["sample"].to(mean.device))
        per = self.log_std + 0.5 * (1.0 + _LOG_2PI)  # [A]
        entropy = per.sum().expand(mean.shape[0]) * parts.shape[1]
        return Evaluation(parts.sum((1, 2)), entropy, self.value_from(feats, obs), parts)

    def get_value(self, obs: dict[str, Any]) -> torch.Tensor:
        if self.critic is None:
            raise NotImplementedError("OFTVLA was built with critic=False")
        if self.config.critic_obs == "privileged":
            return self.value_from(None, obs)
        embeds, mask, _ = self.sequence(obs)
        hidden, _ = self.prefix.run(embeds, mask)
        return self.value_from(masked_mean(hidden, mask), obs)

    def sft_loss(self, obs: dict[str, Any], actions: torch.Tensor) -> torch.Tensor:
        """OFT's objective: L1 between the head's chunk and the normalised demonstration [B, K, A];
        obs['action_valid'] bool [B, K] (optional) masks steps past an episode's end."""
        mean, _ = self.forward_mean(obs)
        err = (mean - self.action_stats.normalize(actions.to(self.device))).abs().mean(-1)  # [B, K]
        valid = obs.get("action_valid")
        if valid is None:
            return err.mean()
        w = valid.to(err.device, err.dtype)
        return (err * w).sum() / w.sum().clamp(min=1.0)
