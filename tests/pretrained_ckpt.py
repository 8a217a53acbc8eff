"""Tiny synthetic pi0 checkpoints in the released formats, and pi0's forward built from the
same transformers modules, for tests/policies/test_pretrained_*.py.

The tensors come from transformers' own PaliGemma and Gemma classes (so every name is the
one those classes produce, not one our loader chose), at openpi's "dummy" Gemma size and a
SigLIP tower of two 72-wide heads, prefixed as openpi's PyTorch port names them. The file
sets follow LeRobot's policy directories (config.json, model.safetensors, the processor
pipelines and their normaliser safetensors) and openpi's export (config.json,
model.safetensors, assets/<id>/norm_stats.json).

`Pi0Reference` is pi0's inference as LeRobot's port of openpi runs it (prefix of image and
language embeddings with bidirectional attention and its KV cache; suffix of one state token
and K action tokens with pi0's block mask, run by the Gemma expert on the cached prefix),
written here with the transformers modules, independently of policies/vla.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch import nn
from transformers import GemmaConfig, GemmaForCausalLM, PaliGemmaConfig, PaliGemmaForConditionalGeneration, \
    PreTrainedTokenizerFast

WORDS = "push pick place the a red green blue cube square onto into reach lift move gripper to target".split()
DUMMY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=1,
             head_dim=16, hidden_activation="gelu_pytorch_tanh")
VOCAB, IMAGE, STATE, ACTION, CHUNK, PAD = 320, 28, 5, 4, 6, 32
MASK_VALUE = -2.3819763e38  # openpi's attention mask value


class Pi0Reference(nn.Module):
    """pi0's modules at tiny size: PaliGemma, the Gemma expert and the five projections."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.paligemma = PaliGemmaForConditionalGeneration(PaliGemmaConfig(
            vision_config=dict(model_type="siglip_vision_model", hidden_size=144, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=2, image_size=IMAGE, patch_size=14,
                               vision_use_head=False, projection_dim=64),
            text_config=dict(model_type="gemma", vocab_size=VOCAB, **DUMMY), image_token_id=VOCAB - 1,
            projection_dim=64))
        self.gemma_expert = GemmaForCausalLM(GemmaConfig(vocab_size=VOCAB, **DUMMY))
        self.gemma_expert.model.embed_tokens = None
        w = DUMMY["hidden_size"]
        self.state_proj, self.action_in_proj = nn.Linear(PAD, w), nn.Linear(PAD, w)
        self.action_out_proj = nn.Linear(w, PAD)
        self.action_time_mlp_in, self.action_time_mlp_out = nn.Linear(2 * w, w), nn.Linear(w, w)
        with torch.no_grad():  # Gemma initialises norm weights to 0 (scale 1); make them matter
            for name, p in self.named_parameters():
                if "norm" in name:
                    p.normal_(0.0, 0.2)
        self.eval()

    def tensors(self, lerobot: bool) -> dict[str, torch.Tensor]:
        """The state dict under openpi's names ("model."-prefixed for LeRobot). LeRobot's file
        keeps the tied head as lm_head only; openpi's keeps both names (cloned)."""
        out = {}
        for k, v in self.state_dict().items():
            k = k.replace("paligemma.", "paligemma_with_expert.paligemma.", 1).replace(
                "gemma_expert.", "paligemma_with_expert.gemma_expert.", 1)
            if lerobot and k.endswith("language_model.embed_tokens.weight"):
                continue
            out[("model." if lerobot else "") + k] = v.detach().clone().contiguous()
        return out

    # -- pi0's inference ---------------------------------------------------------------
    def prefix(self, images: list[torch.Tensor], ids: torch.Tensor, mask: torch.Tensor):
        """images [B, 3, H, W] in [-1, 1] per camera -> (prefix pad mask [B, T], KV cache)."""
        pg = self.paligemma.model
        embs = [pg.get_image_features(img).pooler_output for img in images]
        embs.append(pg.language_model.embed_tokens(ids))
        pad = torch.cat([torch.ones(e.shape[:2], dtype=torch.bool) for e in embs[:-1]] + [mask], dim=1)
        att = pad[:, None, :] & pad[:, :, None]  # one block: every real token sees every real token
        out = pg.language_model(inputs_embeds=torch.cat(embs, 1), attention_mask=_float_mask(att),
                                position_ids=pad.long().cumsum(1) - 1, use_cache=True)
        return pad, out.past_key_values

    def velocity(self, pad: torch.Tensor, cache, state: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor):
        """One denoising step of pi0: v [B, K, PAD] at x_t [B, K, PAD], t [B]."""
        w = DUMMY["hidden_size"]
        frac = torch.linspace(0.0, 1.0, w // 2, dtype=torch.float64)
        period = 4e-3 * (4.0 / 4e-3) ** frac
        angle = (2 * math.pi / period)[None] * t.double()[:, None]
        time = torch.cat([torch.sin(angle), torch.cos(angle)], 1).float()[:, None].expand(-1, x_t.shape[1], -1)
        act = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(torch.cat([self.action_in_proj(x_t), time], 2))))
        suffix = torch.cat([self.state_proj(state)[:, None], act], 1)
        B, L, T = suffix.shape[0], suffix.shape[1], pad.shape[1]
        block = torch.tensor([1, 2] + [2] * (L - 2))
        att = torch.cat([pad[:, None, :].expand(B, L, T), (block[None, :] <= block[:, None]).expand(B, L, L)], 2)
        pos = pad.long().sum(1)[:, None] + torch.arange(L)[None]
        out = self.gemma_expert.model(inputs_embeds=suffix, attention_mask=_float_mask(att), position_ids=pos,
                                      past_key_values=copy.deepcopy(cache), use_cache=True)
        return self.action_out_proj(out.last_hidden_state[:, -x_t.shape[1]:])

    @torch.no_grad()
    def sample(self, pad, cache, state, noise, steps: int) -> torch.Tensor:
        """Euler from t = 1 to 0 as pi0 does (dt = -1 / steps)."""
        x, dt = noise, -1.0 / steps
        for i in range(steps):
            t = torch.full((noise.shape[0],), 1.0 - i / steps)
            x = x + dt * self.velocity(pad, cache, state, x, t)
        return x


def _float_mask(att: torch.Tensor) -> torch.Tensor:
    return torch.where(att, 0.0, MASK_VALUE)[:, None].float()


def write_tokenizer(path: Path) -> Path:
    """A word-level Hugging Face tokenizer (<bos> first, as PaliGemma's; pi0.5's prompt words and
    the 256 state bins as words), saved locally."""
    words = ["<pad>", "<unk>", "<bos>", *WORDS, "Task", "State", "Action", ":", ",", ";", *map(str, range(256))]
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                            bos_token="<bos>").save_pretrained(str(path))
    return path


def norm_stats(seed: int = 1) -> dict[str, dict[str, list[float]]]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for key, dim in (("state", STATE), ("action", ACTION)):
        mean, std = torch.randn(dim, generator=g) * 0.1, torch.rand(dim, generator=g) * 0.5 + 0.2
        out[key] = {"mean": mean.tolist(), "std": std.tolist(), "q01": (mean - 2 * std).tolist(),
                    "q99": (mean + 2.5 * std).tolist(), "min": (mean - 3 * std).tolist(), "max": (mean + 3 * std).tolist()}
    return out


def write_lerobot_pi0(path: Path, ref: Pi0Reference, cameras: list[str], mode: str = "MEAN_STD") -> Path:
    """A LeRobot pi0 policy directory."""
    path.mkdir(parents=True, exist_ok=True)
    save_file(ref.tensors(lerobot=True), str(path / "model.safetensors"))
    norm_map = {"VISUAL": "IDENTITY", "STATE": mode, "ACTION": mode}
    feats = {f"observation.images.{c}": {"type": "VISUAL", "shape": [3, IMAGE, IMAGE]} for c in cameras}
    feats["observation.state"] = {"type": "STATE", "shape": [STATE]}
    config = {"type": "pi0", "n_obs_steps": 1, "input_features": feats,
              "output_features": {"action": {"type": "ACTION", "shape": [ACTION]}}, "device": "cpu",
              "normalization_mapping": norm_map, "chunk_size": 50, "n_action_steps": 50, "max_state_dim": PAD,
              "max_action_dim": PAD, "num_inference_steps": 10, "paligemma_variant": "dummy",
              "action_expert_variant": "dummy", "dtype": "float32", "image_resolution": [IMAGE, IMAGE],
              "tokenizer_max_length": 48, "min_period": 4e-3, "max_period": 4.0}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    write_processors(path, norm_map)
    return path


def write_processors(path: Path, norm_map: dict[str, str]) -> None:
    """LeRobot's processor pipelines and their normaliser statistics (norm_stats())."""
    stats = norm_stats()
    flat = {f"observation.state.{k}": torch.tensor(v) for k, v in stats["state"].items()}
    flat.update({f"action.{k}": torch.tensor(v) for k, v in stats["action"].items()})
    save_file(flat, str(path / "policy_preprocessor_step_5_normalizer_processor.safetensors"))
    save_file({k: v for k, v in flat.items() if k.startswith("action.")},
              str(path / "policy_postprocessor_step_1_unnormalizer_processor.safetensors"))
    steps = ["rename_observations_processor", "to_batch_processor", "pi0_new_line_processor", "tokenizer_processor",
             "device_processor"]
    pre = [{"registry_name": n, "config": {}} for n in steps]
    pre.append({"registry_name": "normalizer_processor", "config": {"eps": 1e-8, "norm_map": norm_map},
                "state_file": "policy_preprocessor_step_5_normalizer_processor.safetensors"})
    post = [{"registry_name": "device_processor", "config": {"device": "cpu"}},
            {"registry_name": "unnormalizer_processor", "config": {"eps": 1e-8, "norm_map": norm_map},
             "state_file": "policy_postprocessor_step_1_unnormalizer_processor.safetensors"}]
    (path / "policy_preprocessor.json").write_text(json.dumps({"name": "policy_preprocessor", "steps": pre}))
    (path / "policy_postprocessor.json").write_text(json.dumps({"name": "policy_postprocessor", "steps": post}))


def write_openpi(path: Path, ref: Pi0Reference, asset_id: str = "tiny_task") -> Path:
    """An openpi PyTorch export directory."""
    path.mkdir(parents=True, exist_ok=True)
    save_file(ref.tensors(lerobot=False), str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"action_dim": PAD, "action_horizon": 50, "paligemma_variant": "dummy",
                                                  "action_expert_variant": "dummy", "precision": "float32"}))
    stats = norm_stats()
    (path / "assets" / asset_id).mkdir(parents=True)
    (path / "assets" / asset_id / "norm_stats.json").write_text(json.dumps(
        {"norm_stats": {"state": stats["state"], "actions": stats["action"]}}))
    return path


class AdaNorm(nn.Module):
    """pi0.5's adaptive RMSNorm, as its checkpoints name it (a `dense` layer per norm)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dense = nn.Linear(dim, 3 * dim)

    def forward(self, x, cond):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        scale, shift, gate = self.dense(cond)[:, None].chunk(3, dim=-1)
        return h * (1 + scale) + shift, gate


class Pi05Reference(Pi0Reference):
    """pi0.5 at tiny size: the expert's norms are adaptive, time goes through time_mlp_in/out,
    no state projection (the state is text). The expert's forward is written out here from
    the Gemma layers' own projections, MLP and rotary embedding."""

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        torch.manual_seed(seed + 1)
        w = DUMMY["hidden_size"]
        del self.state_proj, self.action_time_mlp_in, self.action_time_mlp_out
        self.time_mlp_in, self.time_mlp_out = nn.Linear(w, w), nn.Linear(w, w)
        expert = self.gemma_expert.model
        for layer in expert.layers:
            layer.input_layernorm, layer.post_attention_layernorm = AdaNorm(w), AdaNorm(w)
        expert.norm = AdaNorm(w)
        self.eval()

    def velocity(self, pad, cache, state, x_t, t):
        from transformers.models.gemma.modeling_gemma import apply_rotary_pos_emb

        w, K = DUMMY["hidden_size"], x_t.shape[1]
        frac = torch.linspace(0.0, 1.0, w // 2, dtype=torch.float64)
        angle = (2 * math.pi / (4e-3 * (4.0 / 4e-3) ** frac))[None] * t.double()[:, None]
        cond = F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(torch.cat([torch.sin(angle), torch.cos(angle)], 1).float()))))
        x = self.action_in_proj(x_t)
        B, T = x.shape[0], pad.shape[1]
        bias = _float_mask(torch.cat([pad[:, None, :].expand(B, K, T), torch.ones(B, K, K, dtype=torch.bool)], 2))
        pos = pad.long().sum(1)[:, None] + torch.arange(K)[None]
        expert = self.gemma_expert.model
        cos, sin = expert.rotary_emb(x, pos)
        for i, layer in enumerate(expert.layers):
            att = layer.self_attn
            h, gate = layer.input_layernorm(x, cond)
            q, k, v = (proj(h).view(B, K, -1, 16).transpose(1, 2) for proj in (att.q_proj, att.k_proj, att.v_proj))
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            keys, values = torch.cat([cache.layers[i].keys, k], 2), torch.cat([cache.layers[i].values, v], 2)
            scores = q @ keys.transpose(2, 3) / math.sqrt(16) + bias  # one kv head, broadcast
            out = (scores.softmax(-1) @ values).transpose(1, 2).reshape(B, K, -1)
            x = x + att.o_proj(out) * gate
            h, gate = layer.post_attention_layernorm(x, cond)
            x = x + layer.mlp(h) * gate
        return self.action_out_proj(expert.norm(x, cond)[0])


def write_lerobot_pi05(path: Path, ref: Pi05Reference, cameras: list[str]) -> Path:
    """A LeRobot pi0.5 policy directory (quantile normalisation, as pi0.5 uses)."""
    write_lerobot_pi0(path, ref, cameras, mode="QUANTILES")
    config = json.loads((path / "config.json").read_text())
    config.update(type="pi05", tokenizer_max_length=200)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def real_size_keys(pi05: bool = False) -> dict[str, torch.Tensor]:
    """The tensors (on the meta device: shapes only) of a real-size pi0 / pi0.5 under openpi's
    names: PaliGemma-3B (SigLIP so400m/14 at 224, Gemma-2B, 257152 tokens) from transformers'
    own classes with openpi's Gemma variants, the Gemma-300M expert, the projections."""
    gemma_2b = dict(hidden_size=2048, intermediate_size=16384, num_hidden_layers=18, num_attention_heads=8,
                    num_key_value_heads=1, head_dim=256, hidden_activation="gelu_pytorch_tanh", vocab_size=257152)
    gemma_300m = {**gemma_2b, "hidden_size": 1024, "intermediate_size": 4096}
    with torch.device("meta"):
        pg = PaliGemmaForConditionalGeneration(PaliGemmaConfig(
            vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                               num_hidden_layers=27, num_attention_heads=16, image_size=224, patch_size=14,
                               vision_use_head=False, projection_dim=2048),
            text_config=dict(model_type="gemma", **gemma_2b), image_token_id=257152, projection_dim=2048))
        expert = GemmaForCausalLM(GemmaConfig(**gemma_300m))
        expert.model.embed_tokens = None
        heads = {"action_in_proj": nn.Linear(32, 1024), "action_out_proj": nn.Linear(1024, 32)}
        if pi05:
            for layer in expert.model.layers:
                layer.input_layernorm, layer.post_attention_layernorm = AdaNorm(1024), AdaNorm(1024)
            expert.model.norm = AdaNorm(1024)
            heads.update(time_mlp_in=nn.Linear(1024, 1024), time_mlp_out=nn.Linear(1024, 1024))
        else:
            heads.update(state_proj=nn.Linear(32, 1024), action_time_mlp_in=nn.Linear(2048, 1024),
                         action_time_mlp_out=nn.Linear(1024, 1024))
    out = {f"paligemma_with_expert.paligemma.{k}": v for k, v in pg.state_dict().items()}
    out.update({f"paligemma_with_expert.gemma_expert.{k}": v for k, v in expert.state_dict().items()})
    for name, module in heads.items():
        out.update({f"{name}.{k}": v for k, v in module.state_dict().items()})
    return out
