"""Real-size presets: parameter counts come from the configs on the meta device (nothing is
allocated at real size), and the pi0 presets agree with the loader's Gemma variants."""

from __future__ import annotations

import torch

from policies.vla.config import FlowVLAConfig
from policies.vla.flow import FlowVLA
from policies.vla.pretrained.pi0 import GEMMA, SIGLIP_HEAD_DIM
from policies.vla.pretrained.presets import PRESETS, parameter_count


def test_meta_device_count_equals_the_built_model():
    cfg = FlowVLAConfig(expert_arch="gemma_ada", lm_type="gemma", critic=False,
                        lm=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
                                num_key_value_heads=1, head_dim=16))
    real = sum(p.numel() for p in FlowVLA(cfg).parameters())
    assert parameter_count(cfg)["total"] == real


def test_pi0_presets_match_the_loaders_variants():
    for name in ("pi0", "pi05"):
        cfg = PRESETS[name]()
        lm, g = cfg.lm, GEMMA["gemma_2b"]
        assert (lm["hidden_size"], lm["intermediate_size"], lm["num_hidden_layers"], lm["head_dim"]) == (
            g["width"], g["mlp_dim"], g["depth"], g["head_dim"])
        assert (cfg.expert_hidden, cfg.expert_intermediate) == (GEMMA["gemma_300m"]["width"], GEMMA["gemma_300m"]["mlp_dim"])
        assert cfg.vision["hidden_size"] == cfg.vision["num_attention_heads"] * SIGLIP_HEAD_DIM
    counts = parameter_count(PRESETS["pi0"]())
    w, e = GEMMA["gemma_2b"]["width"], GEMMA["gemma_300m"]
    assert counts["prefix.lm"] > 257152 * w and counts["expert"] > e["depth"] * 3 * e["width"] * e["mlp_dim"]
    assert torch.get_default_device().type == "cpu"  # the meta device did not leak


def test_real_size_key_layouts_map_strictly_onto_the_presets():
    """Every tensor of a real-size pi0 / pi0.5 (built by transformers on the meta device: names
    and shapes, no memory) has its place in our model and every parameter is filled."""
    from pretrained_ckpt import real_size_keys
    from policies.vla.pretrained.pi0 import architecture, canonical, place

    for pi05, preset in ((False, "pi0"), (True, "pi05")):
        tensors = real_size_keys(pi05)
        del tensors["paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"]  # tied: LeRobot's file keeps lm_head
        shapes = {k: tuple(v.shape) for k, v in tensors.items()}
        arch = architecture({canonical(k): v for k, v in shapes.items()}, {"paligemma_variant": "gemma_2b",
                            "action_expert_variant": "gemma_300m"}, 32)
        assert arch["pi05"] == pi05 and arch["vision"]["num_attention_heads"] == 16 and arch["vocab"] == 257152
        cfg = PRESETS[preset]()
        with torch.device("meta"):
            policy = FlowVLA(cfg)
        source = type("Source", (dict,), {"shapes": shapes})(tensors)  # as files.LazyTensors, on meta tensors
        report = place(policy, source, preset)
        assert report.filled == len(tensors) - 1 and list(report.consumed) == [
            "paligemma_with_expert.gemma_expert.lm_head.weight"]
        fresh = {k.split(".")[0] for k in report.fresh}
        assert fresh <= {"noise_head", "state_stats", "action_stats"}, fresh


def test_real_size_smolvla_layout_maps_strictly_onto_its_preset():
    from pretrained_ckpt_smolvla import real_size_smolvla_keys
    from policies.vla.pretrained.smolvla import our_name
    from policies.vla.pretrained.strict import fill

    tensors = real_size_smolvla_keys()
    origin = {our_name(k.removeprefix("model.")): k for k in tensors if our_name(k.removeprefix("model."))}
    head = "model.vlm_with_expert.vlm.lm_head.weight"
    with torch.device("meta"):
        policy = FlowVLA(PRESETS["smolvla"]())
    report = fill(policy, tensors, {k: tuple(v.shape) for k, v in tensors.items()}, origin,
                  {head: "unused vocabulary head"}, ("noise_head.", "state_stats.", "action_stats."), "smolvla")
    assert report.filled == len(tensors) - 1
    assert parameter_count(PRESETS["smolvla"]())["total"] + tensors[head].numel() == sum(
        v.numel() for v in tensors.values()) + policy.noise_head.proj.weight.numel() + policy.noise_head.proj.bias.numel()
