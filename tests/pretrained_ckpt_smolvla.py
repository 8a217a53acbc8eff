"""Tiny synthetic SmolVLA checkpoints in LeRobot's format, SmolVLA's inference built from the
transformers modules, and a real-size SmolVLA's layout on the meta device, for
tests/policies/test_pretrained_smolvla.py and tests/policies/test_pretrained_presets.py (companion of
pretrained_ckpt.py, whose tokenizer, statistics and processor writers it reuses)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from pretrained_ckpt import ACTION, PAD, STATE, VOCAB, _float_mask, write_processors, write_tokenizer


SMOL_IMAGE = 32


class SmolVLAReference(nn.Module):
    """SmolVLA at tiny size: transformers' SmolVLM (SigLIP-style tower, pixel-shuffle connector,
    Llama text model) and a Llama expert whose odd layers' k / v read the VLM's key / value
    width, as LeRobot builds them; its inference written out here from those modules."""

    def __init__(self, seed: int = 0):
        super().__init__()
        from transformers import LlamaConfig, LlamaModel, SmolVLMConfig, SmolVLMForConditionalGeneration

        torch.manual_seed(seed)
        rope = {"rope_type": "default", "rope_theta": 10000.0}
        text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5, rope_parameters=rope)
        self.vlm_config = SmolVLMConfig(
            vision_config=dict(model_type="smolvlm_vision", hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, image_size=SMOL_IMAGE, patch_size=8),
            text_config=dict(model_type="llama", **text), scale_factor=2, image_token_id=VOCAB - 1)
        self.vlm = SmolVLMForConditionalGeneration(self.vlm_config)
        self.lm_expert = LlamaModel(LlamaConfig(**{**text, "hidden_size": 48, "intermediate_size": 256}))
        self.lm_expert.embed_tokens = None
        for i, layer in enumerate(self.lm_expert.layers):
            if i % 2:  # cross-attention layers read the VLM's keys / values (2 heads x 16)
                layer.self_attn.k_proj, layer.self_attn.v_proj = nn.Linear(32, 32, bias=False), nn.Linear(32, 32, bias=False)
        self.state_proj, self.action_in_proj, self.action_out_proj = nn.Linear(PAD, 64), nn.Linear(PAD, 48), nn.Linear(48, PAD)
        self.action_time_mlp_in, self.action_time_mlp_out = nn.Linear(96, 48), nn.Linear(48, 48)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name:
                    p.normal_(1.0, 0.2)
        self.eval()

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {}
        for k, v in self.state_dict().items():
            k = k.replace("vlm.", "vlm_with_expert.vlm.", 1) if k.startswith("vlm.") else k
            k = k.replace("lm_expert.", "vlm_with_expert.lm_expert.", 1) if k.startswith("lm_expert.") else k
            out["model." + k] = v.detach().clone().contiguous()
        return out

    def vision(self, img: torch.Tensor) -> torch.Tensor:
        """The SmolVLM tower with transformers 4.x's patch positions (those SmolVLA was trained
        with): along each axis patch i > 0 takes position i - 1 (transformers 5 computes i)."""
        vm = self.vlm.model.vision_model
        side = SMOL_IMAGE // 8
        axis = (torch.arange(side) - 1).clamp(min=0)
        ids = (axis[:, None] * side + axis[None, :]).flatten()
        x = vm.embeddings.patch_embedding(img).flatten(2).transpose(1, 2) + vm.embeddings.position_embedding(ids)
        return vm.post_layernorm(vm.encoder(inputs_embeds=x).last_hidden_state)

    def prefix(self, images, ids, mask, state):
        m = self.vlm.model
        d = m.text_model.config.hidden_size
        embs = [m.connector(self.vision(img)) * d ** 0.5 for img in images]
        embs += [m.text_model.embed_tokens(ids) * math.sqrt(d), self.state_proj(state)[:, None]]
        pad = torch.cat([torch.ones(e.shape[:2], dtype=torch.bool) for e in embs[:-2]]
                        + [mask, torch.ones(mask.shape[0], 1, dtype=torch.bool)], 1)
        block = torch.zeros(pad.shape[1], dtype=torch.long)
        block[-1] = 1  # the state: its own block, unseen by the images and the text
        att = (block[None, :] <= block[:, None])[None] & pad[:, None, :] & pad[:, :, None]
        out = m.text_model(inputs_embeds=torch.cat(embs, 1), attention_mask=_float_mask(att),
                           position_ids=pad.long().cumsum(1) - 1, use_cache=True)
        return pad, out.past_key_values

    def velocity(self, pad, cache, state, x_t, t):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        w, (B, K, _), T = 48, x_t.shape, pad.shape[1]
        frac = torch.linspace(0.0, 1.0, w // 2, dtype=torch.float64)
        angle = (2 * math.pi / (4e-3 * (4.0 / 4e-3) ** frac))[None] * t.double()[:, None]
        time = torch.cat([torch.sin(angle), torch.cos(angle)], 1).float()[:, None].expand(-1, K, -1)
        x = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(torch.cat([self.action_in_proj(x_t), time], 2))))
        causal = torch.ones(K, K, dtype=torch.bool).tril()
        for i, layer in enumerate(self.lm_expert.layers):
            att, h = layer.self_attn, layer.input_layernorm(x)
            q = att.q_proj(h).view(B, K, -1, 16).transpose(1, 2)
            pk, pv = cache.layers[i].keys, cache.layers[i].values  # [B, 2, T, 16], keys rotated
            if i % 2 == 0:  # joint self-attention: positions after the prefix, actions causal
                pos = pad.long().sum(1)[:, None] + torch.arange(K)[None]
                cos, sin = self.lm_expert.rotary_emb(x, pos)
                k, v = (proj(h).view(B, K, -1, 16).transpose(1, 2) for proj in (att.k_proj, att.v_proj))
                q, k = apply_rotary_pos_emb(q, k, cos, sin)
                keys, values = torch.cat([pk, k], 2), torch.cat([pv, v], 2)
                seen = torch.cat([pad[:, None, :].expand(B, K, T), causal.expand(B, K, K)], 2)
            else:  # cross-attention on the re-projected prefix keys / values, positions from 0
                cos, sin = self.lm_expert.rotary_emb(x, torch.arange(K)[None].expand(B, K))
                q = q * cos[:, None] + torch.cat([-q[..., 8:], q[..., :8]], -1) * sin[:, None]
                keys = att.k_proj(pk.transpose(1, 2).reshape(B, T, -1)).view(B, T, -1, 16).transpose(1, 2)
                values = att.v_proj(pv.transpose(1, 2).reshape(B, T, -1)).view(B, T, -1, 16).transpose(1, 2)
                seen = pad[:, None, :].expand(B, K, T)
            keys, values = keys.repeat_interleave(2, 1), values.repeat_interleave(2, 1)
            scores = torch.where(seen[:, None], q @ keys.transpose(2, 3) * 16 ** -0.5, torch.finfo(torch.float32).min)
            out = (scores.softmax(-1) @ values).transpose(1, 2).reshape(B, K, -1)
            x = x + att.o_proj(out)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.action_out_proj(self.lm_expert.norm(x))

    @torch.no_grad()
    def sample(self, pad, cache, state, noise, steps: int) -> torch.Tensor:
        x = noise
        for i in range(steps):
            x = x - self.velocity(pad, cache, state, x, torch.full((noise.shape[0],), 1.0 - i / steps)) / steps
        return x


def write_lerobot_smolvla(path: Path, ref: SmolVLAReference, cameras: list[str], vlm_dir: Path) -> Path:
    """A LeRobot SmolVLA policy directory, and the local SmolVLM2 directory (its config and a
    tokenizer) that SmolVLA's checkpoints need beside them."""
    path.mkdir(parents=True, exist_ok=True)
    save_file(ref.tensors(), str(path / "model.safetensors"))
    norm_map = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    feats = {f"observation.images.{c}": {"type": "VISUAL", "shape": [3, SMOL_IMAGE, SMOL_IMAGE]} for c in cameras}
    feats["observation.state"] = {"type": "STATE", "shape": [STATE]}
    config = {"type": "smolvla", "n_obs_steps": 1, "input_features": feats, "normalization_mapping": norm_map,
              "output_features": {"action": {"type": "ACTION", "shape": [ACTION]}}, "chunk_size": 50,
              "n_action_steps": 50, "max_state_dim": PAD, "max_action_dim": PAD,
              "resize_imgs_with_padding": [SMOL_IMAGE, SMOL_IMAGE], "tokenizer_max_length": 48, "num_steps": 10,
              "vlm_model_name": "HuggingFaceTB/SmolVLM2-500M-Video-Instruct", "attention_mode": "cross_attn",
              "self_attn_every_n_layers": 2, "num_vlm_layers": 4, "num_expert_layers": -1,
              "expert_width_multiplier": 0.75, "add_image_special_tokens": False, "prefix_length": -1,
              "min_period": 4e-3, "max_period": 4.0}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    write_processors(path, norm_map)
    ref.vlm_config.save_pretrained(str(vlm_dir))
    write_tokenizer(vlm_dir)
    return path


def real_size_smolvla_keys() -> dict[str, torch.Tensor]:
    """A real-size SmolVLA's tensors on the meta device (shapes only), under LeRobot's names:
    SmolVLM2-500M (SigLIP-B/16 at 512, scale-4 connector, SmolLM2-360M cut to 16 layers) and
    the 720-wide expert whose odd layers' k / v read the VLM's 5 x 64 keys / values."""
    from transformers import LlamaConfig, LlamaModel, SmolVLMConfig, SmolVLMForConditionalGeneration

    text = dict(vocab_size=49280, hidden_size=960, intermediate_size=2560, num_hidden_layers=16, num_attention_heads=15,
                num_key_value_heads=5, head_dim=64, rms_norm_eps=1e-5)
    with torch.device("meta"):
        vlm = SmolVLMForConditionalGeneration(SmolVLMConfig(
            vision_config=dict(model_type="smolvlm_vision", hidden_size=768, intermediate_size=3072,
                               num_hidden_layers=12, num_attention_heads=12, image_size=512, patch_size=16),
            text_config=dict(model_type="llama", **text), scale_factor=4, image_token_id=49279))
        expert = LlamaModel(LlamaConfig(**{**text, "hidden_size": 720, "intermediate_size": 2048}))
        expert.embed_tokens = None
        for i, layer in enumerate(expert.layers):
            if i % 2:
                layer.self_attn.k_proj, layer.self_attn.v_proj = nn.Linear(320, 320, bias=False), nn.Linear(320, 320, bias=False)
        heads = {"state_proj": nn.Linear(32, 960), "action_in_proj": nn.Linear(32, 720),
                 "action_out_proj": nn.Linear(720, 32), "action_time_mlp_in": nn.Linear(1440, 720),
                 "action_time_mlp_out": nn.Linear(720, 720)}
    out = {f"model.vlm_with_expert.vlm.{k}": v for k, v in vlm.state_dict().items()}
    out.update({f"model.vlm_with_expert.lm_expert.{k}": v for k, v in expert.state_dict().items()})
    for name, module in heads.items():
        out.update({f"model.{name}.{k}": v for k, v in module.state_dict().items()})
    return out
