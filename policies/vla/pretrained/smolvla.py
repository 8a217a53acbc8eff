"""SmolVLA (LeRobot policy directory) -> FlowVLA with the SmolVLA expert.

SmolVLA's checkpoint holds the VLM (SmolVLM2, truncated to its first layers) and the expert,
but not the VLM's config: its sizes come from the local SmolVLM2 directory that also holds
the tokenizer (config.json: text_config, vision_config, scale_factor). Names (LeRobot's
"model." prefix removed):

  vlm_with_expert.vlm.model.vision_model.X                  prefix.vision.X
  vlm_with_expert.vlm.model.connector.modality_projection.proj   prefix.projector (pixel shuffle)
  vlm_with_expert.vlm.model.text_model.X                    prefix.lm.X
  vlm_with_expert.vlm.lm_head.weight                        consumed: SmolVLA never computes token logits
  vlm_with_expert.lm_expert.layers.i.{input,post_attention}_layernorm    expert.layers.i.norm{1,2}
  vlm_with_expert.lm_expert.layers.i.self_attn.{q,k,v,o}_proj           expert.layers.i.{q,k,v,o}
  vlm_with_expert.lm_expert.layers.i.mlp.{gate,up,down}_proj            expert.layers.i.{gate,up,down}
  vlm_with_expert.lm_expert.norm                            expert.norm
  state_proj                                                state_proj (the state's prefix token)
  action_in_proj / action_out_proj / action_time_mlp_in / _out   expert.action_in / action_out / action_time.0 / .2

Its vision tower's patch positions follow transformers 4.x (the versions SmolVLA was trained and
is run with by LeRobot 0.4.x), which differ from transformers 5's (VLAConfig.vision_position_ids).

Only SmolVLA's default layout is supported (attention_mode cross_attn, a self-attention
layer every 2, no image special tokens, no fixed prefix length, one expert layer per VLM
layer); another value is a one-line error naming the field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from policies.vla.config import FlowVLAConfig
from policies.vla.flow import FlowVLA
from policies.vla.pretrained import norm_stats as norm
from policies.vla.pretrained.files import LazyTensors, PretrainedError, read_json
from policies.vla.pretrained.input_map import InputMap
from policies.vla.pretrained.pi0 import FRESH, make_policy
from policies.vla.pretrained.strict import LoadReport, fill

VLM, EXP = "vlm_with_expert.vlm.", "vlm_with_expert.lm_expert."
_LAYER = {"input_layernorm": "norm1", "post_attention_layernorm": "norm2", "self_attn.q_proj": "q",
          "self_attn.k_proj": "k", "self_attn.v_proj": "v", "self_attn.o_proj": "o", "mlp.gate_proj": "gate",
          "mlp.up_proj": "up", "mlp.down_proj": "down"}
_HEADS = {"state_proj": "state_proj", "action_in_proj": "expert.action_in", "action_out_proj": "expert.action_out",
          "action_time_mlp_in": "expert.action_time.0", "action_time_mlp_out": "expert.action_time.2"}
SUPPORTED = {"attention_mode": "cross_attn", "self_attn_every_n_layers": 2, "add_image_special_tokens": False,
             "num_expert_layers": -1}


def our_name(key: str) -> str | None:
    """Checkpoint key ("model." removed) -> our state-dict name (None: not part of the layout)."""
    for src, dst in ((VLM + "model.vision_model.", "prefix.vision."), (VLM + "model.text_model.", "prefix.lm."),
                     (VLM + "model.connector.modality_projection.proj.", "prefix.projector.")):
        if key.startswith(src):
            return dst + key[len(src):]
    m = re.fullmatch(re.escape(EXP) + r"layers\.(\d+)\.(.+)", key)
    for sub, ours in _LAYER.items() if m else ():
        if m.group(2).startswith(sub + "."):
            return f"expert.layers.{m.group(1)}.{ours}.{m.group(2)[len(sub) + 1:]}"
    if key.startswith(EXP + "norm."):
        return "expert.norm." + key[len(EXP + "norm."):]
    head, _, leaf = key.rpartition(".")
    return f"{_HEADS[head]}.{leaf}" if head in _HEADS else None


def _config(path: Path, config: dict[str, Any], shapes: dict[str, tuple[int, ...]], vlm_dir: Path,
            imap: InputMap) -> FlowVLAConfig:
    for field, want in SUPPORTED.items():
        if config.get(field, want) != want:
            raise PretrainedError(f"{path / 'config.json'}: {field}={config[field]!r} is not supported "
                                  f"(only SmolVLA's default {want!r})")
    if int(config.get("prefix_length", -1)) > 0:
        raise PretrainedError(f"{path / 'config.json'}: prefix_length={config['prefix_length']} is not supported (-1)")
    vlm = read_json(vlm_dir / "config.json", "the SmolVLM2 config beside its tokenizer")
    text, vision = vlm.get("text_config", {}), vlm.get("vision_config", {})

    def count(prefix: str) -> int:
        ids = {int(m.group(1)) for k in shapes if (m := re.match(re.escape(prefix) + r"(\d+)\.", k))}
        return max(ids) + 1 if ids else 0

    def need(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise PretrainedError(f"{path / 'model.safetensors'}: missing checkpoint key {key!r}; not a SmolVLA checkpoint")
        return shapes[key]

    embed = shapes.get(VLM + "model.text_model.embed_tokens.weight", shapes.get(VLM + "lm_head.weight"))
    if embed is None:
        raise PretrainedError(f"{path / 'model.safetensors'}: missing checkpoint key "
                              f"{VLM + 'model.text_model.embed_tokens.weight'!r}")
    heads = int(text.get("num_attention_heads", 0))
    head_dim = int(text.get("head_dim") or int(text.get("hidden_size", 0)) // max(heads, 1))
    feats = config.get("input_features", {})
    cams = [k for k, f in feats.items() if f.get("type") == "VISUAL" and not k.startswith("observation.images.empty_camera_")]
    state_dim = int(feats.get("observation.state", {}).get("shape", [0])[0])
    if len(imap.state_indices) != state_dim:
        raise PretrainedError(f"{imap.path}: {len(imap.state_indices)} state_indices; the checkpoint's state has {state_dim} dims")
    action_dim = int(config.get("output_features", {}).get("action", {}).get("shape", [0])[0])
    if action_dim != imap.action_dim:
        raise PretrainedError(f"{imap.path}: action_dim {imap.action_dim}; the checkpoint outputs {action_dim}")
    size = int(vision.get("image_size", 512))
    if imap.image_size is not None and imap.image_size != size:
        raise PretrainedError(f"{imap.path}: image_size {imap.image_size}; the vision tower reads {size}")
    return FlowVLAConfig(
        action_dim=action_dim, state_dim=state_dim, chunk_size=imap.chunk_size, execute_steps=imap.execute_steps,
        max_state_dim=need("state_proj.weight")[1], max_action_dim=need("action_in_proj.weight")[1],
        cameras=imap.env_cameras(cams, all_required=True), state_indices=list(imap.state_indices),
        prompt_template="{task}\n", prefix_attention="bidirectional", pixel_shuffle=int(vlm.get("scale_factor", 4)),
        embed_scale=True, state_in_prefix=True, expert_arch="smolvla", vision_position_ids="idefics_4x",
        max_text_len=int(config.get("tokenizer_max_length", 48)), num_steps=imap.num_steps or int(config.get("num_steps", 10)),
        time_min_period=float(config.get("min_period", 4e-3)), time_max_period=float(config.get("max_period", 4.0)),
        vision=dict(hidden_size=need(VLM + "model.vision_model.embeddings.patch_embedding.weight")[0],
                    intermediate_size=need(VLM + "model.vision_model.encoder.layers.0.mlp.fc1.weight")[0],
                    num_hidden_layers=count(VLM + "model.vision_model.encoder.layers."),
                    num_attention_heads=int(vision.get("num_attention_heads", 12)), image_size=size,
                    patch_size=int(vision.get("patch_size", 16)), layer_norm_eps=float(vision.get("layer_norm_eps", 1e-6)),
                    vision_use_head=False),
        lm_type="llama",
        lm=dict(hidden_size=need(VLM + "model.text_model.layers.0.self_attn.q_proj.weight")[1],
                intermediate_size=need(VLM + "model.text_model.layers.0.mlp.gate_proj.weight")[0],
                num_hidden_layers=count(VLM + "model.text_model.layers."), num_attention_heads=heads,
                num_key_value_heads=int(text.get("num_key_value_heads", heads)), head_dim=head_dim,
                rms_norm_eps=float(text.get("rms_norm_eps", 1e-5)), vocab_size=embed[0],
                max_position_embeddings=int(text.get("max_position_embeddings", 8192)),
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),  # SmolVLA's own rotary base
        expert_hidden=need(EXP + "layers.0.self_attn.q_proj.weight")[1],
        expert_intermediate=need(EXP + "layers.0.mlp.gate_proj.weight")[0])


def load_lerobot(path: Path, imap: InputMap, tokenizer: str | Path) -> tuple[FlowVLA, LoadReport]:
    """A LeRobot SmolVLA policy directory; `tokenizer` is the local SmolVLM2 directory."""
    config = read_json(path / "config.json", "LeRobot policy config")
    tensors = LazyTensors(path / "model.safetensors", "weights")
    shapes = {k.removeprefix("model."): v for k, v in tensors.shapes.items()}
    cfg = _config(path, config, shapes, Path(tokenizer), imap)
    state, action = norm.lerobot(path, config)
    policy = make_policy(cfg, tokenizer, shapes.get(VLM + "model.text_model.embed_tokens.weight",
                                                    shapes.get(VLM + "lm_head.weight"))[0], str(path), "SmolVLM2's")
    origin, consumed = {}, {}
    for key in tensors.shapes:
        name = our_name(key.removeprefix("model."))
        if name is not None:
            origin[name] = key
    head = next((k for k in tensors.shapes if k.removeprefix("model.") == VLM + "lm_head.weight"), None)
    if head is not None:
        if "prefix.lm.embed_tokens.weight" not in origin:
            origin["prefix.lm.embed_tokens.weight"] = head  # tied, saved once
        else:
            consumed[head] = "the VLM's vocabulary head; SmolVLA never computes token logits"
    report = fill(policy, tensors, tensors.shapes, origin, consumed, FRESH, str(path / "model.safetensors"))
    norm.apply(policy, state, action)
    return policy, report
