"""Real-size configs of the released architectures, and parameter counts from configs alone.

  pi0        PaliGemma-3B (SigLIP so400m/14 at 224 + Gemma-2B) with a Gemma-300M expert;
             loads lerobot/pi0-style and openpi pi0 checkpoints exactly
  pi05       the same backbone with pi0.5's adaptive-RMSNorm Gemma-300M expert; loads pi0.5
  smolvla    SmolVLA: SmolVLM2-500M's SigLIP-B/16 tower at 512 with its pixel-shuffle connector
             (scale 4) and the first 16 of SmolLM2-360M's 32 layers, a 720-wide expert (0.75 x
             960, MLP 2048) alternating self- and cross-attention; loads lerobot/smolvla_base-style
             checkpoints
  openvla    our ARVLA at OpenVLA's sizes: Llama-2-7B with a SigLIP so400m/14 tower. OpenVLA's
             DINOv2 ViT-L/14 tower (counted separately by `dinov2_vit_l14`) and 3-layer projector
             have no place in it, so OpenVLA's token checkpoints do NOT load into it (docs/vla.md)
  openvla_oft  (a function, not in PRESETS, whose entries are Flow / AR configs) OFTVLA at
             OpenVLA-OFT's LIBERO sizes: Llama-2-7B, DINOv2-L/14 (4 registers) + SigLIP so400m/14
             at 224 px holding the 23 / 26 blocks OpenVLA reads, the 3-layer projector, proprio 8,
             the L1 head for 8 x 7 actions; two cameras (third-person and wrist)

`parameter_count` builds the model on the meta device (shapes, no memory), so the counts come
from the same code that loads the weights; nothing is allocated at real size.
"""

from __future__ import annotations

from typing import Any

import torch

from policies.vla.config import ARVLAConfig, FlowVLAConfig

SIGLIP_SO400M = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                     image_size=224, patch_size=14, vision_use_head=False)
GEMMA_2B = dict(hidden_size=2048, intermediate_size=16384, num_hidden_layers=18, num_attention_heads=8,
                num_key_value_heads=1, head_dim=256, vocab_size=257152, hidden_activation="gelu_pytorch_tanh",
                rms_norm_eps=1e-6, max_position_embeddings=8192)


def _pi0(expert_arch: str) -> FlowVLAConfig:
    pi05 = expert_arch == "gemma_ada"
    return FlowVLAConfig(
        action_dim=7, state_dim=8, chunk_size=50, max_state_dim=32, max_action_dim=32, cameras=["base_0_rgb"],
        vision=dict(SIGLIP_SO400M), lm_type="gemma", lm=dict(GEMMA_2B), expert_hidden=1024, expert_intermediate=4096,
        expert_arch=expert_arch, prefix_attention="bidirectional", max_text_len=200 if pi05 else 48,
        prompt_template="Task: {clean_task}, State: {state};\nAction: " if pi05 else "{task}\n", critic=False)


def smolvla() -> FlowVLAConfig:
    return FlowVLAConfig(
        action_dim=6, state_dim=6, chunk_size=50, max_state_dim=32, max_action_dim=32, cameras=["top"],
        vision=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                    image_size=512, patch_size=16, vision_use_head=False),
        lm_type="llama", lm=dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=16, num_attention_heads=15,
                                 num_key_value_heads=5, head_dim=64, vocab_size=49280, rms_norm_eps=1e-5,
                                 max_position_embeddings=8192, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        expert_hidden=720, expert_intermediate=2048, expert_arch="smolvla", state_in_prefix=True, pixel_shuffle=4,
        embed_scale=True, prefix_attention="bidirectional", prompt_template="{task}\n", vision_position_ids="idefics_4x",
        critic=False)


def openvla() -> ARVLAConfig:
    return ARVLAConfig(
        action_dim=7, state_dim=8, chunk_size=1, cameras=["primary"], vision=dict(SIGLIP_SO400M), lm_type="llama",
        lm=dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096), state_token=False,
        critic=False)


def openvla_oft() -> Any:
    from policies.vla.pretrained.oft_policy import OFTVLAConfig

    return OFTVLAConfig(
        action_dim=7, state_dim=8, chunk_size=8, cameras=["primary", "wrist"], critic=False,
        dino=dict(hidden_size=1024, num_hidden_layers=23, num_attention_heads=16, mlp_ratio=4, image_size=224,
                  patch_size=14, num_register_tokens=4, layerscale_value=1.0, layer_norm_eps=1e-6),
        vision=dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=26, num_attention_heads=16,
                    image_size=224, patch_size=14, hidden_act="gelu", layer_norm_eps=1e-6, vision_use_head=False),
        lm_type="llama", lm=dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                                 num_key_value_heads=32, vocab_size=32064, max_position_embeddings=2048,
                                 rms_norm_eps=1e-6), max_text_len=128)


PRESETS = {"pi0": lambda: _pi0("gemma"), "pi05": lambda: _pi0("gemma_ada"), "smolvla": smolvla, "openvla": openvla}


def parameter_count(config: Any) -> dict[str, int]:
    """{"total": n, "<top-level module>": n, ...} of the policy `config` builds, on the meta device."""
    from policies.vla.autoregressive import ARVLA
    from policies.vla.flow import FlowVLA
    from policies.vla.pretrained.oft_policy import OFTVLA, OFTVLAConfig

    cls = FlowVLA if isinstance(config, FlowVLAConfig) else OFTVLA if isinstance(config, OFTVLAConfig) else ARVLA
    with torch.device("meta"):
        policy = cls(config)
    out = {"total": 0}
    for name, p in policy.named_parameters():
        out["total"] += p.numel()
        parts = name.split(".")
        key = ".".join(parts[:2]) if parts[0] == "prefix" else parts[0]
        out[key] = out.get(key, 0) + p.numel()
    return out


def dinov2_vit_l14() -> int:
    """Parameters of OpenVLA's second vision tower (DINOv2 ViT-L/14 at 224), which ARVLA lacks."""
    from transformers import Dinov2Config, Dinov2Model

    with torch.device("meta"):
        model = Dinov2Model(Dinov2Config(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                         intermediate_size=4096, patch_size=14, image_size=224))
    return sum(p.numel() for p in model.parameters())
