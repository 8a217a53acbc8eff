"""pi0 / pi0.5 (LeRobot policy directory or openpi PyTorch export) -> FlowVLA with the Gemma expert.

Both formats hold one network, PaliGemma (SigLIP tower + linear projector + Gemma LM) with a
Gemma action expert, under the names of openpi's PyTorch port (LeRobot prefixes them with
"model."; transformers < 4.52 layouts put the LM under paligemma.language_model.model and
the tower / projector under paligemma directly, and transformers 4 nests the SigLIP tower's
weights under vision_tower.vision_model; all are read). Our names:

  paligemma.model.vision_tower.X                 prefix.vision.X
  paligemma.model.multi_modal_projector.linear   prefix.projector
  paligemma.model.language_model.X               prefix.lm.X
  paligemma.lm_head.weight                       tied to embed_tokens: equal, or the embeddings
  gemma_expert.model.layers.i.input_layernorm    expert.layers.i.norm1 (post_attention_layernorm: norm2)
  gemma_expert.model.layers.i.self_attn.{q,k,v,o}_proj    expert.layers.i.{q,k,v,o}
  gemma_expert.model.layers.i.mlp.{gate,up,down}_proj     expert.layers.i.{gate,up,down}
  gemma_expert.model.norm                        expert.norm
  gemma_expert.lm_head.weight                    consumed: pi0 never reads the expert's vocabulary head
  state_proj / action_in_proj / action_out_proj  expert.state_in / action_in / action_out
  action_time_mlp_in / _out                      expert.action_time.0 / .2
pi0.5 (expert_arch gemma_ada, policies/vla/expert_ada.py) has no state_proj and no action-time
MLP; instead
  time_mlp_in / time_mlp_out                     expert.time_in / time_out
  gemma_expert.model.layers.i.{input,post_attention}_layernorm.dense    expert.layers.i.norm{1,2}.dense
  gemma_expert.model.norm.dense                  expert.norm.dense
and its state is text: "Task: <instruction>, State: <256-bin state>;\nAction: " (prompt_template).

The architecture is read from the tensors' shapes (every pi0 Gemma has one key/value head,
so head_dim is k_proj's width; SigLIP heads are 72 wide as in so400m) and checked against
the named Gemma variants when the config names them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from policies.vla.config import FlowVLAConfig
from policies.vla.flow import FlowVLA
from policies.vla.pretrained import norm_stats as norm
from policies.vla.pretrained.files import LazyTensors, PretrainedError, read_json
from policies.vla.pretrained.input_map import InputMap
from policies.vla.pretrained.strict import LoadReport, fill

# openpi's Gemma variants (gemma.py get_config); "dummy" is its tiny test size.
GEMMA = {"gemma_2b": dict(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256),
         "gemma_300m": dict(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
         "dummy": dict(width=64, depth=4, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16)}
SIGLIP_HEAD_DIM = 72
OPENPI_CAMERAS = ["base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"]
FRESH = ("noise_head.", "critic.", "critic_norm.", "state_stats.", "action_stats.")
PG, EX = "paligemma_with_expert.paligemma.", "paligemma_with_expert.gemma_expert."
_OLD = [(PG + "language_model.model.", PG + "model.language_model."), (PG + "language_model.lm_head.", PG + "lm_head."),
        (PG + "vision_tower.", PG + "model.vision_tower."),
        (PG + "multi_modal_projector.", PG + "model.multi_modal_projector."),
        (PG + "model.vision_tower.vision_model.", PG + "model.vision_tower.")]
_EXPERT = {"input_layernorm": "norm1", "post_attention_layernorm": "norm2", "self_attn.q_proj": "q",
           "self_attn.k_proj": "k", "self_attn.v_proj": "v", "self_attn.o_proj": "o", "mlp.gate_proj": "gate",
           "mlp.up_proj": "up", "mlp.down_proj": "down"}
_HEADS = {"state_proj": "expert.state_in", "action_in_proj": "expert.action_in", "action_out_proj": "expert.action_out",
          "action_time_mlp_in": "expert.action_time.0", "action_time_mlp_out": "expert.action_time.2",
          "time_mlp_in": "expert.time_in", "time_mlp_out": "expert.time_out"}
PI05_MARKER, PI0_MARKER = "time_mlp_in.weight", "state_proj.weight"
PI05_PROMPT = "Task: {clean_task}, State: {state};\nAction: "


def canonical(key: str) -> str:
    """LeRobot's "model." prefix off, old transformers layouts renamed to the current one."""
    key = key[len("model."):] if key.startswith("model.") else key
    for old, new in _OLD:  # in order: the old tower path, then transformers 4's vision_model level
        if key.startswith(old):
            key = new + key[len(old):]
    return key


def our_name(key: str) -> str | None:
    """Canonical checkpoint key -> our state-dict name (None: not part of the layout)."""
    for src, dst in ((PG + "model.vision_tower.", "prefix.vision."), (PG + "model.language_model.", "prefix.lm."),
                     (PG + "model.multi_modal_projector.linear.", "prefix.projector.")):
        if key.startswith(src):
            return dst + key[len(src):]
    m = re.fullmatch(re.escape(EX) + r"model\.layers\.(\d+)\.(.+)", key)
    for sub, ours in _EXPERT.items() if m else ():
        if m.group(2).startswith(sub + "."):  # a name our layer lacks (a bias, say) is caught by strict.fill
            return f"expert.layers.{m.group(1)}.{ours}.{m.group(2)[len(sub) + 1:]}"
    if key.startswith(EX + "model.norm."):
        return "expert.norm." + key[len(EX + "model.norm."):]
    head, _, leaf = key.rpartition(".")
    if head in _HEADS and leaf in ("weight", "bias"):
        return f"{_HEADS[head]}.{leaf}"
    return None


def architecture(t: dict[str, tuple[int, ...]], variants: dict[str, str], max_state_dim: int | None = None) -> dict[str, Any]:
    """Widths and depths from the tensor shapes `t` (canonical key -> shape); checked against
    named Gemma variants. pi0.5
    (time_mlp_in present) has no state_proj: its padded state width comes from the config."""
    def need(key: str) -> tuple[int, ...]:
        if key not in t:
            raise PretrainedError(f"missing checkpoint key {key!r}; not a pi0 checkpoint")
        return t[key]

    def layers(prefix: str) -> int:
        ids = {int(m.group(1)) for k in t if (m := re.match(re.escape(prefix) + r"(\d+)\.", k))}
        return max(ids) + 1 if ids else 0

    def gemma(base: str, depth_prefix: str, name: str) -> dict[str, int]:
        q, k = need(base + "self_attn.q_proj.weight"), need(base + "self_attn.k_proj.weight")
        dims = dict(width=q[1], depth=layers(depth_prefix), mlp_dim=need(base + "mlp.gate_proj.weight")[0],
                    num_heads=q[0] // k[0], num_kv_heads=1, head_dim=k[0])
        variant = variants.get(name)
        if variant is not None and variant.removesuffix("_lora") in GEMMA and GEMMA[variant.removesuffix("_lora")] != dims:
            raise PretrainedError(f"{name}: the config names {variant!r} ({GEMMA[variant.removesuffix('_lora')]}); "
                                  f"the tensors hold {dims}")
        return dims

    lm = gemma(PG + "model.language_model.layers.0.", PG + "model.language_model.layers.", "paligemma_variant")
    ex = gemma(EX + "model.layers.0.", EX + "model.layers.", "action_expert_variant")
    vt = PG + "model.vision_tower."
    patch = need(vt + "embeddings.patch_embedding.weight")
    width, p = patch[0], patch[-1]
    if width % SIGLIP_HEAD_DIM:
        raise PretrainedError(f"vision tower width {width} is not a multiple of SigLIP's head width {SIGLIP_HEAD_DIM}")
    grid = int(round(need(vt + "embeddings.position_embedding.weight")[0] ** 0.5))
    vision = dict(hidden_size=width, intermediate_size=need(vt + "encoder.layers.0.mlp.fc1.weight")[0],
                  num_hidden_layers=layers(vt + "encoder.layers."), num_attention_heads=width // SIGLIP_HEAD_DIM,
                  image_size=grid * p, patch_size=p, vision_use_head=False)
    embed = t.get(PG + "model.language_model.embed_tokens.weight", t.get(PG + "lm_head.weight"))
    if embed is None:
        raise PretrainedError(f"missing checkpoint key {PG + 'model.language_model.embed_tokens.weight'!r}")
    pi05 = PI05_MARKER in t
    if pi05 and PI0_MARKER in t:
        raise PretrainedError(f"the checkpoint holds both {PI0_MARKER!r} (pi0) and {PI05_MARKER!r} (pi0.5)")
    state_width = need(PI0_MARKER)[1] if not pi05 else max_state_dim
    if state_width is None:
        raise PretrainedError("a pi0.5 checkpoint needs its max_state_dim (the config's, or openpi's action_dim)")
    return dict(lm=lm, expert=ex, vision=vision, vocab=embed[0], pi05=pi05,
                max_state_dim=int(state_width), max_action_dim=need("action_in_proj.weight")[1])


def flow_config(arch: dict[str, Any], imap: InputMap, cameras: list[str], state_dim: int, **extra: Any) -> FlowVLAConfig:
    """Our FlowVLA config for a pi0 architecture and an input map."""
    lm = arch["lm"]
    if imap.image_size is not None and imap.image_size != arch["vision"]["image_size"]:
        raise PretrainedError(f"{imap.path}: image_size {imap.image_size}; the checkpoint's vision tower reads "
                              f"{arch['vision']['image_size']}")
    if len(imap.state_indices) != state_dim:
        raise PretrainedError(f"{imap.path}: {len(imap.state_indices)} state_indices; the checkpoint's state has "
                              f"{state_dim} dims")
    return FlowVLAConfig(
        action_dim=imap.action_dim, state_dim=state_dim, chunk_size=imap.chunk_size, execute_steps=imap.execute_steps,
        max_state_dim=arch["max_state_dim"], max_action_dim=arch["max_action_dim"], cameras=cameras,
        state_indices=list(imap.state_indices), prompt_template=PI05_PROMPT if arch["pi05"] else "{task}\n",
        prefix_attention="bidirectional",
        vision=arch["vision"], lm_type="gemma",
        lm=dict(hidden_size=lm["width"], intermediate_size=lm["mlp_dim"], num_hidden_layers=lm["depth"],
                num_attention_heads=lm["num_heads"], num_key_value_heads=lm["num_kv_heads"], head_dim=lm["head_dim"],
                vocab_size=arch["vocab"], hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
                max_position_embeddings=8192),
        expert_hidden=arch["expert"]["width"], expert_intermediate=arch["expert"]["mlp_dim"],
        expert_arch="gemma_ada" if arch["pi05"] else "gemma",
        **extra)


def place(policy: FlowVLA, tensors: LazyTensors, where: str) -> LoadReport:
    """Map every checkpoint tensor onto the policy strictly (strict.fill)."""
    origin, consumed = {}, {}
    canon = {canonical(k): k for k in tensors.shapes}
    for ck, src in canon.items():
        name = our_name(ck)
        if name is not None:
            origin[name] = src
    head = canon.get(PG + "lm_head.weight")
    if head is not None:
        embed_name = "prefix.lm.embed_tokens.weight"
        if embed_name not in origin:
            origin[embed_name] = head
        elif not torch.equal(tensors[origin[embed_name]], tensors[head]):
            raise PretrainedError(f"{where}: {head!r} differs from the embeddings; PaliGemma ties them")
        else:
            consumed[head] = "tied to the embeddings"
    expert_head = canon.get(EX + "lm_head.weight")
    if expert_head is not None:
        consumed[expert_head] = "the action expert's vocabulary head; pi0 / pi0.5 never read it"
    return fill(policy, tensors, tensors.shapes, origin, consumed, FRESH, where)


def make_policy(cfg: FlowVLAConfig, tokenizer: str | Path, vocab: int, where: str, whose: str = "PaliGemma's") -> FlowVLA:
    """The FlowVLA for `cfg` with the local Hugging Face tokenizer (at most `vocab` tokens)."""
    tok = Path(tokenizer)
    if not (tok / "tokenizer.json").is_file() or not (tok / "tokenizer_config.json").is_file():
        raise PretrainedError(f"tokenizer: {tok} is not a local Hugging Face tokenizer directory (tokenizer.json + "
                              f"tokenizer_config.json); the checkpoint uses {whose}, which it does not ship")
    policy = FlowVLA(cfg, _source_dir=tok)
    if policy.text_vocab > vocab:
        raise PretrainedError(f"{where}: the tokenizer has {policy.text_vocab} tokens, the checkpoint's embeddings {vocab}")
    return policy


def load_lerobot(path: Path, imap: InputMap, tokenizer: str | Path) -> tuple[FlowVLA, LoadReport]:
    """A LeRobot pi0 / pi0.5 policy directory: config.json, model.safetensors, the processors' stats."""
    config = read_json(path / "config.json", "LeRobot policy config")
    tensors = LazyTensors(path / "model.safetensors", "weights")
    canon = {canonical(k): v for k, v in tensors.shapes.items()}
    arch = architecture(canon, {k: config.get(k) for k in ("paligemma_variant", "action_expert_variant")},
                        config.get("max_state_dim"))
    if arch["pi05"] != (config.get("type") == "pi05"):
        raise PretrainedError(f"{path}: config.json says type {config.get('type')!r}, the weights hold "
                              f"{'pi0.5' if arch['pi05'] else 'pi0'}'s layout")
    feats = config.get("input_features", {})
    # LeRobot's empty_cameras are always-masked image slots: never attended, so leaving them out is exact
    cams = [k for k, f in feats.items() if f.get("type") == "VISUAL"
            and not k.startswith("observation.images.empty_camera_")]
    state_dim = int(feats.get("observation.state", {}).get("shape", [0])[0])
    action_dim = int(config.get("output_features", {}).get("action", {}).get("shape", [0])[0])
    if action_dim != imap.action_dim:
        raise PretrainedError(f"{imap.path}: action_dim {imap.action_dim}; the checkpoint outputs {action_dim}")
    if imap.chunk_size > int(config.get("chunk_size", imap.chunk_size)):
        raise PretrainedError(f"{imap.path}: chunk_size {imap.chunk_size} exceeds the checkpoint's {config['chunk_size']}")
    cfg = flow_config(arch, imap, imap.env_cameras(cams, all_required=True), state_dim,
                      num_steps=imap.num_steps or int(config.get("num_inference_steps", 10)),
                      max_text_len=int(config.get("tokenizer_max_length", 200 if arch["pi05"] else 48)),
                      time_min_period=float(config.get("min_period", 4e-3)),
                      time_max_period=float(config.get("max_period", 4.0)))
    state, action = norm.lerobot(path, config)
    policy = make_policy(cfg, tokenizer, arch["vocab"], str(path))
    report = place(policy, tensors, str(path / "model.safetensors"))
    norm.apply(policy, state, action)
    return policy, report


def load_openpi(path: Path, imap: InputMap, tokenizer: str | Path) -> tuple[FlowVLA, LoadReport]:
    """An openpi PyTorch export: model.safetensors, config.json (optional), assets/<id>/norm_stats.json."""
    config = read_json(path / "config.json", "openpi config") if (path / "config.json").exists() else {}
    tensors = LazyTensors(path / "model.safetensors", "weights")
    arch = architecture({canonical(k): v for k, v in tensors.shapes.items()}, {k: config.get(k) for k in ("paligemma_variant", "action_expert_variant")},
                        config.get("action_dim", 32))
    if imap.chunk_size > int(config.get("action_horizon", imap.chunk_size)):
        raise PretrainedError(f"{imap.path}: chunk_size {imap.chunk_size} exceeds the export's action_horizon "
                              f"{config['action_horizon']}")
    state, action = norm.openpi(path, imap.asset_id, imap.normalization)
    if action.centre.numel() != imap.action_dim:
        raise PretrainedError(f"{imap.path}: action_dim {imap.action_dim}; the norm stats have "
                              f"{action.centre.numel()} action dims")
    cfg = flow_config(arch, imap, imap.env_cameras(OPENPI_CAMERAS, all_required=False), state.centre.numel(),
                      num_steps=imap.num_steps or 10, max_text_len=200 if arch["pi05"] else 48)
    policy = make_policy(cfg, tokenizer, arch["vocab"], str(path))
    report = place(policy, tensors, str(path / "model.safetensors"))
    norm.apply(policy, state, action)
    return policy, report
