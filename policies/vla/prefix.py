"""The vision-language prefix: SigLIP image tokens projected into the LM width, then the
instruction's tokens, run through a decoder LM whose KV cache is returned.

Token layout of one row (T = cameras * P + L + E (+1 with `marker`)):
    [image tokens of camera 1 .. camera C][instruction ids, right-padded to L][E extra][marker]
(the AR policy's extra token is its projected proprioceptive state; the flow policy passes
none, its action expert reads the state).
Pads are masked out of attention; position ids count real tokens only, so the marker
(the AR policy's first prediction point) sits right after the real tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, SiglipVisionConfig, SiglipVisionModel

from policies.tokenizer import DEFAULT_CORPUS, InstructionTokenizer
from policies.vla.config import VLAConfig


@dataclass
class Prefix:
    hidden: torch.Tensor  # float [B, T, D] last hidden states of the LM
    mask: torch.Tensor  # bool [B, T] real (non-pad) tokens
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per LM layer: keys, values [B, Hkv, T, Dh]
    next_position: torch.Tensor  # int64 [B] position id of the first token after the prefix


class TextTokenizer:
    """The word tokenizer (tiny presets) or a local Hugging Face tokenizer, one interface."""

    def __init__(self, cfg: VLAConfig, directory: str | Path | None = None):
        self.hf = None
        src = directory if directory is not None and (Path(directory) / "tokenizer.json").is_file() else None
        if cfg.pretrained_lm is not None or (src is not None and _is_hf_tokenizer(src)):
            from transformers import AutoTokenizer

            if src is None:
                _need_dir(cfg.pretrained_lm, "pretrained_lm")
            self.hf = AutoTokenizer.from_pretrained(str(src or cfg.pretrained_lm), local_files_only=True)
            if self.hf.pad_token_id is None:
                self.hf.pad_token = self.hf.eos_token
        elif src is not None:
            self.words = InstructionTokenizer.load(src)
        else:
            self.words = InstructionTokenizer.train([*DEFAULT_CORPUS, *cfg.instructions])

    @property
    def vocab_size(self) -> int:
        return len(self.hf) if self.hf is not None else self.words.vocab_size

    def batch(self, texts: Sequence[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """ids int64 [B, L], mask bool [B, L] (right-padded)."""
        if self.hf is None:
            return self.words.batch(texts, max_length)
        enc = self.hf(list(texts), padding="max_length", truncation=True, max_length=max_length,
                      return_tensors="pt")
        return enc["input_ids"].long(), enc["attention_mask"].bool()

    def save(self, directory: str | Path) -> None:
        if self.hf is not None:
            self.hf.save_pretrained(str(directory))
        else:
            self.words.save(directory)


def _is_hf_tokenizer(directory: str | Path) -> bool:
    return (Path(directory) / "tokenizer_config.json").is_file()


def build_vision(cfg: VLAConfig) -> SiglipVisionModel:
    if cfg.pretrained_vision is not None:
        _need_dir(cfg.pretrained_vision, "pretrained_vision")
        vision = SiglipVisionModel.from_pretrained(cfg.pretrained_vision, local_files_only=True)
    else:
        vision = SiglipVisionModel(SiglipVisionConfig(**cfg.vision))
    if cfg.vision_position_ids == "idefics_4x":  # a non-persistent buffer: rebuilt from the config on load
        side = int(vision.config.image_size) // int(vision.config.patch_size)
        emb = vision.vision_model.embeddings if hasattr(vision, "vision_model") else vision.embeddings
        emb.position_ids.copy_(idefics_4x_positions(side)[None].to(emb.position_ids.device))
    return vision


def idefics_4x_positions(side: int) -> torch.Tensor:
    """Patch position ids of a full side x side grid as transformers 4.x's Idefics3 / SmolVLM
    embeddings compute them: per axis bucketize(i / side * (1 - 1e-6), arange(1/side, 1, 1/side),
    right=True) in float32, so index i > 0 lands in bucket i - 1 wherever i / side is exact."""
    boundaries = torch.arange(1 / side, 1.0, 1 / side)
    frac = torch.arange(side, dtype=torch.float32) / torch.tensor(side) * (1 - 1e-6)
    b = torch.bucketize(frac, boundaries, right=True)
    return (b[:, None] * side + b[None, :]).flatten()


def build_lm(cfg: VLAConfig, vocab_size: int, causal_lm: bool) -> nn.Module:
    """The decoder LM (a base model, or a *ForCausalLM when `causal_lm`) of `vocab_size` tokens."""
    auto = AutoModelForCausalLM if causal_lm else AutoModel
    if cfg.pretrained_lm is not None:
        _need_dir(cfg.pretrained_lm, "pretrained_lm")
        lm = auto.from_pretrained(cfg.pretrained_lm, local_files_only=True)
        if lm.get_input_embeddings().num_embeddings < vocab_size:
            lm.resize_token_embeddings(vocab_size)
        return lm
    vocab_size = max(int(cfg.lm.get("vocab_size", 0)), vocab_size)  # a recorded real LM keeps its size
    lm_cfg = AutoConfig.for_model(cfg.lm_type, **{**cfg.lm, "vocab_size": vocab_size})
    return auto.from_config(lm_cfg)


def _need_dir(path: str, key: str) -> None:
    if not Path(path).is_dir():
        raise FileNotFoundError(f"{key}: {path} is not a directory (weights are read locally, never downloaded)")


class VisionLanguagePrefix(nn.Module):
    """obs -> Prefix (hidden states, mask, per-layer KV cache). `lm` may be a *ForCausalLM."""

    def __init__(self, cfg: VLAConfig, vision: SiglipVisionModel, lm: nn.Module, marker: bool = False):
        super().__init__()
        self.cfg = cfg
        self.vision, self.lm = vision, lm
        self.image_size = int(vision.config.image_size)
        shuffle = cfg.pixel_shuffle  # SmolVLM's connector: s x s patches -> one token, bias-free Linear
        self.projector = (nn.Linear(vision.config.hidden_size * shuffle ** 2, self.width, bias=False) if shuffle
                          else nn.Linear(vision.config.hidden_size, self.width))
        self.marker = nn.Parameter(torch.zeros(self.width)) if marker else None

    @property
    def base(self) -> nn.Module:
        """The LM's transformer without its head (a property: registering it twice would
        save every weight twice)."""
        return self.lm.model if hasattr(self.lm, "lm_head") else self.lm

    @property
    def width(self) -> int:
        return int(self.lm.config.get_text_config().hidden_size)

    @property
    def lm_config(self) -> Any:
        return self.lm.config.get_text_config()

    def image_tokens(self, obs: dict[str, Any]) -> torch.Tensor:
        """uint8 [B, H, W, 3] per camera -> float [B, C * P, D] projected patch tokens."""
        tokens = []
        for cam in self.cfg.cameras:
            img = obs[f"rgb_{cam}"].permute(0, 3, 1, 2).float() / 255.0  # [B, 3, H, W]
            if img.shape[-1] != self.image_size or img.shape[-2] != self.image_size:
                img = F.interpolate(img, size=(self.image_size, self.image_size), mode="bilinear",
                                    align_corners=False)
            pixels = (img - 0.5) / 0.5  # SigLIP normalisation: mean 0.5, std 0.5
            feats = self.vision(pixel_values=pixels.to(self.projector.weight.dtype)).last_hidden_state
            tokens.append(pixel_shuffle(feats, self.cfg.pixel_shuffle) if self.cfg.pixel_shuffle else feats)
        out = self.projector(torch.cat(tokens, dim=1))
        return out * out.shape[-1] ** 0.5 if self.cfg.embed_scale else out

    def embed(self, obs: dict[str, Any], ids: torch.Tensor, text_mask: torch.Tensor,
              extra: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Input embeddings float [B, T, D] and mask bool [B, T] (layout in the module doc);
        extra: optional tokens float [B, E, D] placed after the instruction."""
        img = self.image_tokens(obs)
        txt = self.lm.get_input_embeddings()(ids.to(img.device))
        if self.cfg.embed_scale:  # SmolVLA scales its (Llama) text embeddings as Gemma does
            txt = txt * math.sqrt(txt.shape[-1])
        parts, masks = [img, txt], [torch.ones(img.shape[:2], dtype=torch.bool, device=img.device),
                                    text_mask.to(img.device)]
        if extra is not None:
            parts.append(extra.to(img.dtype))
            masks.append(torch.ones(extra.shape[:2], dtype=torch.bool, device=img.device))
        if self.marker is not None:
            parts.append(self.marker.expand(img.shape[0], 1, -1).to(img.dtype))
            masks.append(torch.ones(img.shape[0], 1, dtype=torch.bool, device=img.device))
        return torch.cat(parts, dim=1), torch.cat(masks, dim=1)

    def run(self, embeds: torch.Tensor, mask: torch.Tensor, past: Any = None,
            past_mask: torch.Tensor | None = None, start: torch.Tensor | None = None,
            blocks: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        """LM over `embeds` [B, T, D] (after an optional cache of `past_mask` [B, T0] tokens).

        start: int64 [B] position id of the first new token (0 without a cache).
        Returns last hidden states [B, T, D] and the updated DynamicCache.
        """
        full_mask = mask if past_mask is None else torch.cat([past_mask, mask], dim=1)
        offset = torch.zeros(mask.shape[0], dtype=torch.long, device=mask.device) if start is None else start
        positions = offset[:, None] + (mask.long().cumsum(1) - 1).clamp(min=0)
        att: torch.Tensor = full_mask.long()
        if self.cfg.prefix_attention == "bidirectional" and past is None:
            # every token sees every real token of its block and of the blocks before it (blocks:
            # int [T], all 0 unless given); pads see them too, so no row is empty
            att = full_mask[:, None, None, :].expand(-1, 1, mask.shape[1], -1)
            if blocks is not None:
                att = att & (blocks[None, :] <= blocks[:, None]).to(att.device)[None, None]
        out = self.base(inputs_embeds=embeds, attention_mask=att, position_ids=positions,
                        past_key_values=past, use_cache=True)
        return out.last_hidden_state, out.past_key_values

    def forward(self, obs: dict[str, Any], ids: torch.Tensor, text_mask: torch.Tensor,
                extra: torch.Tensor | None = None) -> tuple[Prefix, Any]:
        """extra: tokens [B, E, D] after the instruction (SmolVLA's state), in an attention block
        of their own that the tokens before them do not see."""
        embeds, mask = self.embed(obs, ids, text_mask, extra)
        blocks = None
        if extra is not None:
            blocks = torch.zeros(mask.shape[1], dtype=torch.long, device=mask.device)
            blocks[-extra.shape[1]:] = 1
        hidden, cache = self.run(embeds, mask, blocks=blocks)
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        return Prefix(hidden, mask, kv, mask.long().sum(1)), cache


def pixel_shuffle(x: torch.Tensor, s: int) -> torch.Tensor:
    """SmolVLM's connector rearrangement: patch tokens [B, N, C] on a square grid -> [B, N / s^2,
    C s^2], each output token the s x s block of patches (channels ordered as SmolVLM's)."""
    B, N, C = x.shape
    side = int(round(N ** 0.5))
    x = x.reshape(B, side, side // s, C * s).permute(0, 2, 1, 3)
    x = x.reshape(B, side // s, side // s, C * s * s).permute(0, 2, 1, 3)
    return x.reshape(B, N // (s * s), C * s * s)


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over real tokens: [B, T, D], bool [B, T] -> [B, D]."""
    m = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
