"""An OpenVLA-OFT directory (L1-regression variant) -> OFTVLA, strictly.

Files, as OFT's fine-tuning script writes them:
  config.json                       OpenVLA's Prismatic config: use_fused_vision_backbone, timm_model_ids
                                    (DINOv2-L/14 with 4 registers + SigLIP so400m/14), image_sizes, text_config
  model.safetensors or model-*-of-*.safetensors + model.safetensors.index.json
                                    the VLA, LoRA already merged (OFT saves the merged model beside the
                                    adapter); absent when only the adapter was saved: then `base`
                                    (the model that was fine-tuned, e.g. openvla-7b) is read and the
                                    adapter merged here
  lora_adapter/                     PEFT's adapter_config.json + adapter_model.safetensors
  action_head--*.pt                 the L1 head (a DDP state dict: "module." prefixes)
  proprio_projector--*.pt           optional: the proprio projector
  dataset_statistics.json           {unnorm key: {"action": {q01, q99, min, max, mask}, "proprio": {...}}}
  tokenizer files                   Llama-2's tokenizer (read from the directory unless given)

Names (OpenVLA's vision towers are timm ViTs; ours are transformers', so tensors are renamed and
qkv split into q / k / v):
  vision_backbone.featurizer.X (DINOv2)        prefix.vision.dino.X', blocks.i -> encoder.layer.i:
      attn.qkv -> attention.{q,k,v}_proj, attn.proj -> attention.o_proj, ls1/ls2.scale_factor ->
      layer_scale1/2.lambda1, reg_token -> register_tokens, norm -> layernorm; pos_embed [1, P, W]
      -> position_embeddings [1, 1 + P, W] with a zero row for the class token (timm adds no
      position to DINOv2's class token; transformers adds row 0)
  vision_backbone.fused_featurizer.X (SigLIP)  prefix.vision.siglip.X': blocks.i -> encoder.layers.i
      (norm1/2 -> layer_norm1/2, attn.qkv -> self_attn.{q,k,v}_proj, attn.proj -> self_attn.out_proj),
      pos_embed -> embeddings.position_embedding.weight, norm -> post_layernorm
  projector.fc1-3                              prefix.projector.fc1-3
  language_model.model.X                       prefix.lm.X
  action_head: model.layer_norm1 / fc1 / mlp_resnet_blocks.i.ffn.{0,1} / layer_norm2 / fc2
                                               head.norm_in / fc_in / blocks.i.{norm,fc} / norm_out / fc_out
  proprio_projector: fc1 / fc2                 proprio_proj.fc1 / fc2
Consumed, not placed (each reported): each tower's last block (OpenVLA reads the second-to-last
block's output), SigLIP's attention-pooling head (attn_pool: patch tokens are read, not the pooled
one) and the LM's vocabulary head (the L1 head reads hidden states, never token logits).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from policies.vla.pretrained import norm_stats as norm
from policies.vla.pretrained.files import PretrainedError, read_json
from policies.vla.pretrained.input_map import InputMap
from policies.vla.pretrained.oft_files import Adapter, Sources, component, model_weights
from policies.vla.pretrained.oft_policy import OFTVLA, OFTVLAConfig
from policies.vla.pretrained.strict import LoadReport, fill

VISION_IDS = ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"]
DINO_HEAD_DIM, SIGLIP_HEAD_DIM = 64, 72  # ViT-L/14: 16 heads of 64; so400m: 16 heads of 72
# transformers 4.40's LlamaConfig defaults (OpenVLA's pin): its text_config sets only what differs
LLAMA_DEFAULTS = dict(num_attention_heads=32, hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-6,
                      rope_theta=10000.0)
LLAMA_BACKBONES = ("llama2-7b-pure", "llama2-13b-pure", "llama2-7b-chat", "llama2-13b-chat", "vicuna-v15-7b",
                   "vicuna-v15-13b")
VB, FB, LM = "vision_backbone.featurizer.", "vision_backbone.fused_featurizer.", "language_model."
HEAD, PROPRIO = "action_head:", "proprio_projector:"
FRESH = ("critic.", "critic_norm.", "state_stats.", "action_stats.", "log_std",
         "prefix.vision.dino.embeddings.mask_token")
_DINO_BLOCK = {"norm1": "norm1", "norm2": "norm2", "attn.proj": "attention.o_proj", "mlp.fc1": "mlp.fc1",
               "mlp.fc2": "mlp.fc2", "ls1.scale_factor": "layer_scale1.lambda1",
               "ls2.scale_factor": "layer_scale2.lambda1"}
_SIG_BLOCK = {"norm1": "layer_norm1", "norm2": "layer_norm2", "attn.proj": "self_attn.out_proj", "mlp.fc1": "mlp.fc1",
              "mlp.fc2": "mlp.fc2"}


def _depth(shapes: dict[str, tuple[int, ...]], prefix: str) -> int:
    """1 + the largest i of the keys `<prefix><i>.` (0 if none)."""
    return 1 + max((int(m.group(1)) for k in shapes if (m := re.match(re.escape(prefix) + r"(\d+)\.", k))), default=-1)


def _split(key: str, i: int, source: Sources) -> tuple[Callable[[], torch.Tensor], tuple[int, ...]]:
    """Third i of a fused qkv tensor (rows q, k, v as timm lays them out)."""
    shape = source.shapes[key]
    return (lambda: source[key].chunk(3, dim=0)[i]), (shape[0] // 3, *shape[1:])


Target = tuple[Callable[[], torch.Tensor], tuple[int, ...], str]  # tensor getter, shape, checkpoint key


def plan(source: Sources) -> tuple[dict[str, Target], dict[str, str], set[str]]:
    """Our name -> (tensor getter, shape, checkpoint key), consumed keys with why, and the keys placed."""
    out, used, consumed = {}, set(), {}
    depth = {p: _depth(source.shapes, p + "blocks.") for p in (VB, FB)}

    def put(ours: str, key: str, getter=None, shape=None) -> None:
        out[ours] = (getter or (lambda: source[key]), shape or source.shapes[key], key)
        used.add(key)

    for key, shape in source.shapes.items():
        for tower, ours, table, qkv in ((VB, "prefix.vision.dino.", _DINO_BLOCK, "attention.{}_proj"),
                                        (FB, "prefix.vision.siglip.", _SIG_BLOCK, "self_attn.{}_proj")):
            if not key.startswith(tower):
                continue
            rest = key[len(tower):]
            m = re.fullmatch(r"blocks\.(\d+)\.(.+)\.(weight|bias|scale_factor)", rest)
            if m and int(m.group(1)) == depth[tower] - 1:
                consumed[key] = "the tower's last block: OpenVLA reads the second-to-last block's output"
            elif m:
                layer = f"{ours}encoder.{'layer' if tower == VB else 'layers'}.{m.group(1)}."
                sub = m.group(2) if m.group(3) != "scale_factor" else m.group(2) + ".scale_factor"
                leaf = "" if m.group(3) == "scale_factor" else "." + m.group(3)
                if sub == "attn.qkv":
                    for i, n in enumerate("qkv"):
                        g, s = _split(key, i, source)
                        put(layer + qkv.format(n) + leaf, key, g, s)
                elif sub in table:
                    put(layer + table[sub] + leaf, key)
            elif rest.startswith("attn_pool.") and tower == FB:
                consumed[key] = "SigLIP's attention-pooling head: OpenVLA reads the patch tokens"
            elif tower == VB and rest in ("cls_token", "reg_token"):
                put(ours + "embeddings." + ("cls_token" if rest == "cls_token" else "register_tokens"), key)
            elif rest == "pos_embed" and tower == VB:
                put(ours + "embeddings.position_embeddings", key,
                    lambda k=key, w=shape[-1]: torch.cat([source[k].new_zeros(1, 1, w), source[k]], dim=1),
                    (1, shape[1] + 1, shape[2]))
            elif rest == "pos_embed":
                put(ours + "embeddings.position_embedding.weight", key, lambda k=key: source[k][0], tuple(shape[1:]))
            elif rest.startswith("patch_embed.proj."):
                sub = "embeddings.patch_embeddings.projection." if tower == VB else "embeddings.patch_embedding."
                put(ours + sub + rest.rsplit(".", 1)[1], key)
            elif rest.startswith("norm."):
                put(ours + ("layernorm." if tower == VB else "post_layernorm.") + rest[len("norm."):], key)
        if key.startswith("projector.fc"):
            put("prefix." + key, key)
        elif key.startswith(LM + "model."):
            put("prefix.lm." + key[len(LM + "model."):], key)
        elif key == LM + "lm_head.weight":
            consumed[key] = "the LM's vocabulary head: OFT's L1 head reads hidden states, never token logits"
        elif key.startswith(HEAD):
            rest = key[len(HEAD):]
            m = re.fullmatch(r"model\.mlp_resnet_blocks\.(\d+)\.ffn\.([01])\.(weight|bias)", rest)
            names = {"model.layer_norm1": "norm_in", "model.fc1": "fc_in", "model.layer_norm2": "norm_out",
                     "model.fc2": "fc_out"}
            if m:
                put(f"head.blocks.{m.group(1)}.{'norm' if m.group(2) == '0' else 'fc'}.{m.group(3)}", key)
            elif rest.rsplit(".", 1)[0] in names:
                put(f"head.{names[rest.rsplit('.', 1)[0]]}.{rest.rsplit('.', 1)[1]}", key)
        elif key.startswith(PROPRIO) and key[len(PROPRIO):].split(".")[0] in ("fc1", "fc2"):
            put("proprio_proj." + key[len(PROPRIO):], key)
    return out, consumed, used


def architecture(s: dict[str, tuple[int, ...]], config: dict[str, Any], where: str) -> dict[str, Any]:
    """Sizes from the tensor shapes (heads from the towers' head widths and the text config)."""
    def need(key: str) -> tuple[int, ...]:
        if key not in s:
            raise PretrainedError(f"{where}: missing checkpoint key {key!r}; not an OpenVLA-OFT checkpoint")
        return s[key]

    def depth(prefix: str) -> int:
        return _depth(s, prefix)

    towers = {}
    for p, head in ((VB, DINO_HEAD_DIM), (FB, SIGLIP_HEAD_DIM)):
        patch, pos = need(p + "patch_embed.proj.weight"), need(p + "pos_embed")
        width, n = patch[0], depth(p + "blocks.")
        if n < 2 or width % head or (p == VB and need(p + "blocks.0.mlp.fc1.weight")[0] % width):
            raise PretrainedError(f"{where}: {p} has {n} blocks of width {width}; expected >= 2 blocks, "
                                  f"{head}-wide heads")
        towers[p] = dict(width=width, depth=n, heads=width // head, mlp=need(p + "blocks.0.mlp.fc1.weight")[0],
                         patch=patch[-1], image=int(round(math.sqrt(pos[1]))) * patch[-1])
    d, sg = towers[VB], towers[FB]
    if d["image"] != sg["image"] or d["image"] not in [int(x) for x in config.get("image_sizes", [d["image"]])]:
        raise PretrainedError(f"{where}: tower resolutions {d['image']} / {sg['image']} and config image_sizes "
                              f"{config.get('image_sizes')} disagree")
    text = {**LLAMA_DEFAULTS, **{k: v for k, v in config.get("text_config", {}).items() if k in LLAMA_DEFAULTS}}
    embed = need(LM + "model.embed_tokens.weight")
    heads = int(text["num_attention_heads"])
    return dict(dino=dict(hidden_size=d["width"], num_hidden_layers=d["depth"] - 1, num_attention_heads=d["heads"],
                          mlp_ratio=d["mlp"] // d["width"], image_size=d["image"], patch_size=d["patch"],
                          num_register_tokens=need(VB + "reg_token")[1], layerscale_value=1.0, layer_norm_eps=1e-6),
                siglip=dict(hidden_size=sg["width"], intermediate_size=sg["mlp"], num_hidden_layers=sg["depth"] - 1,
                            num_attention_heads=sg["heads"], image_size=sg["image"], patch_size=sg["patch"],
                            hidden_act="gelu", layer_norm_eps=1e-6, vision_use_head=False),
                lm=dict(hidden_size=embed[1], vocab_size=embed[0], num_hidden_layers=depth(LM + "model.layers."),
                        intermediate_size=need(LM + "model.layers.0.mlp.gate_proj.weight")[0],
                        num_attention_heads=heads,
                        num_key_value_heads=need(LM + "model.layers.0.self_attn.k_proj.weight")[0]
                        // (embed[1] // heads),
                        hidden_act=text["hidden_act"], max_position_embeddings=int(text["max_position_embeddings"]),
                        rms_norm_eps=float(text["rms_norm_eps"]),
                        rope_parameters={"rope_type": "default", "rope_theta": float(text["rope_theta"])}))


def bounds(stats: dict[str, Any], mode: str, where: str) -> norm.Affine:
    """OFT's bounds normalisation x -> 2 (x - low) / (high - low + 1e-8) - 1 as centre / scale;
    dims whose `mask` is false pass through (centre 0, scale 1)."""
    lo, hi = ("q01", "q99") if mode == "bounds_q99" else ("min", "max")
    if lo not in stats or hi not in stats:
        raise PretrainedError(f"{where}: {mode} normalisation needs {lo!r} and {hi!r}; has {sorted(stats)}")
    aff = norm.affine({"q01": stats[lo], "q99": stats[hi]}, "quantile", 1e-8, "add", where)
    mask = torch.as_tensor(stats.get("mask", [True] * aff.centre.numel()), dtype=torch.bool)
    aff.centre, aff.scale = torch.where(mask, aff.centre, 0.0), torch.where(mask, aff.scale, 1.0)
    return aff


def load(path: Path, imap: InputMap, tokenizer: str | Path | None, base: str | Path | None = None
         ) -> tuple[OFTVLA, LoadReport]:
    config = read_json(path / "config.json", "OpenVLA config")
    backbone = config.get("vision_backbone_id", "dinosiglip-vit-so-224px")  # Prismatic derives the timm ids from it
    ids = VISION_IDS if backbone == "dinosiglip-vit-so-224px" else None
    fused = config.get("use_fused_vision_backbone") is not False
    if ids is None or list(config.get("timm_model_ids", ids)) != VISION_IDS or not fused:
        raise PretrainedError(f"{path / 'config.json'}: vision backbone {backbone!r} ({config.get('timm_model_ids')}); "
                              f"only OpenVLA's fused dinosiglip-vit-so-224px {VISION_IDS} loads")
    if config.get("llm_backbone_id", "llama2-7b-pure") not in LLAMA_BACKBONES:
        raise PretrainedError(f"{path / 'config.json'}: llm_backbone_id {config.get('llm_backbone_id')!r}; only "
                              f"Llama-family backbones load ({', '.join(LLAMA_BACKBONES)})")
    if any(config.get("timm_override_act_layers") or []):
        raise PretrainedError(f"{path / 'config.json'}: timm_override_act_layers {config['timm_override_act_layers']} "
                              "is not supported (OpenVLA's towers use GELU)")
    for name, why in (("noisy_action_projector", "a diffusion action head"), ("vision_backbone", "FiLM")):
        if any(path.glob(f"{name}--*.pt")):
            raise PretrainedError(f"{path}: {name}--*.pt means {why}; only OFT's L1-regression variant loads")
    source = model_weights(path, "OpenVLA weights")
    adapter = Adapter(path / "lora_adapter") if (path / "lora_adapter").is_dir() else None
    merge = source is None
    if merge:
        if adapter is None or base is None:
            raise PretrainedError(f"{path}: no model weights; an adapter-only checkpoint needs lora_adapter/ and base "
                                  "(the directory of the model it fine-tuned)")
        source = model_weights(Path(base), "base OpenVLA weights")
        if source is None:
            raise PretrainedError(f"{base}: missing file model.safetensors (the base model's weights)")
    head = component(path, "action_head", required=True)
    if any(k.startswith("noise_predictor") for k in head):
        raise PretrainedError(f"{path}: the action head is a diffusion head; only OFT's L1-regression variant loads")
    source.add_file(head, HEAD)
    proprio = component(path, "proprio_projector", required=False)
    if proprio is not None:
        source.add_file(proprio, PROPRIO)
    consumed_extra = {}
    if adapter is not None:
        unknown = [k for k in adapter.pairs if k not in source.shapes]
        if unknown:  # merged or not, the adapter must fit the model
            raise PretrainedError(f"{path / 'lora_adapter'}: unexpected adapter key for {unknown[0]!r} "
                                  f"({len(unknown)} unexpected); the model has no such weight")
        if merge:
            for k in adapter.pairs:
                get = source.get[k]
                source.get[k] = lambda g=get, k=k: adapter.merged(k, g())
        else:
            consumed_extra = {f"lora_adapter:{a}": "already merged into the model weights (OFT saves both)"
                              for pair in adapter.pairs.values() for a in pair}
    arch = architecture(source.shapes, config, str(path))
    width = arch["lm"]["hidden_size"]
    a_width = source.shapes.get(HEAD + "model.fc2.weight", (0,))[0]
    blocks = len({k.split(".")[2] for k in source.shapes if k.startswith(HEAD + "model.mlp_resnet_blocks.")})
    state_dim = source.shapes.get(PROPRIO + "fc1.weight", (0, 0))[1] if proprio is not None else 0
    if a_width != imap.action_dim:
        raise PretrainedError(f"{imap.path}: action_dim {imap.action_dim}; the checkpoint's head outputs {a_width}")
    if proprio is not None and len(imap.state_indices) != state_dim:
        raise PretrainedError(f"{imap.path}: {len(imap.state_indices)} state_indices; the proprio projector reads "
                              f"{state_dim} dims")
    if imap.image_size is not None and imap.image_size != arch["siglip"]["image_size"]:
        raise PretrainedError(f"{imap.path}: image_size {imap.image_size}; the towers read "
                              f"{arch['siglip']['image_size']}")
    action, state = statistics(path, imap, proprio is not None)
    tok = Path(tokenizer) if tokenizer is not None else path
    if not (tok / "tokenizer.json").is_file() or not (tok / "tokenizer_config.json").is_file():
        raise PretrainedError(f"tokenizer: {tok} is not a local Hugging Face tokenizer directory (tokenizer.json + "
                              "tokenizer_config.json)")
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tok), local_files_only=True)
    empty = hf.convert_tokens_to_ids("\u2581")
    if empty is None or empty == hf.unk_token_id or hf.eos_token_id is None:
        raise PretrainedError(f"tokenizer: {tok} lacks Llama's empty token '\u2581' or an eos token; "
                              "OFT's prompt needs both")
    cfg = OFTVLAConfig(
        action_dim=a_width, state_dim=max(state_dim, 1), chunk_size=imap.chunk_size, execute_steps=imap.execute_steps,
        cameras=imap.env_cameras(list(imap.cameras), all_required=False),
        state_indices=list(imap.state_indices) if proprio is not None else [], dino=arch["dino"],
        vision=arch["siglip"], lm_type="llama", lm=arch["lm"], proprio=proprio is not None, head_blocks=blocks,
        empty_token_id=int(empty), stop_token_id=int(hf.eos_token_id), max_text_len=128)
    policy = OFTVLA(cfg, _source_dir=tok)
    if policy.text_vocab > arch["lm"]["vocab_size"]:
        raise PretrainedError(f"{path}: the tokenizer has {policy.text_vocab} tokens, the embeddings "
                              f"{arch['lm']['vocab_size']}")
    report = place(policy, source, consumed_extra, str(path))
    norm.apply(policy, state if state is not None else norm.Affine(torch.zeros(1), torch.ones(1), "none", "-"), action)
    return policy, report


def statistics(path: Path, imap: InputMap, proprio: bool) -> tuple[norm.Affine, norm.Affine | None]:
    """Action (and proprio) statistics of the input map's unnorm key."""
    where = path / "dataset_statistics.json"
    data = read_json(where, "OFT dataset statistics")
    keys = sorted(data) if isinstance(data, dict) else []
    key = imap.unnorm_key
    if key is None and len(keys) != 1:
        raise PretrainedError(f"{where}: {len(keys)} unnorm keys {keys}; set unnorm_key in the input map")
    key = key if key is not None else keys[0]
    if key not in keys:
        raise PretrainedError(f"{where}: unnorm_key {key!r} is not there; available: {', '.join(keys)}")
    if imap.normalization not in ("bounds_q99", "bounds"):
        raise PretrainedError(f"{imap.path}: normalization {imap.normalization!r}; OFT checkpoints do not record it, "
                              "set bounds_q99 (OFT's LIBERO / Bridge constants) or bounds (ALOHA)")
    entry = data[key]
    for part in ("action",) + (("proprio",) if proprio else ()):
        if not isinstance(entry.get(part), dict):
            raise PretrainedError(f"{where}: {key!r} has no {part!r} statistics")
    action = bounds(entry["action"], imap.normalization, f"{where}:{key}.action")
    state = bounds(entry["proprio"], imap.normalization, f"{where}:{key}.proprio") if proprio else None
    return action, state


def place(policy: OFTVLA, source: Sources, consumed_extra: dict[str, str], where: str) -> LoadReport:
    """Strict placement (strict.fill) of the renamed, split tensors."""
    targets, consumed, used = plan(source)
    unexpected = [k for k in source.shapes if k not in used and k not in consumed]
    if unexpected:
        raise PretrainedError(f"{where}: unexpected checkpoint key {unexpected[0]!r} ({len(unexpected)} unexpected); "
                              "the OFT layout does not use it")
    own = policy.state_dict()
    for ours, (_, shape, key) in targets.items():
        if ours not in own:
            raise PretrainedError(f"{where}: unexpected checkpoint key {key!r}; it maps to {ours!r}, "
                                  "which this model lacks")
        if tuple(shape) != tuple(own[ours].shape):
            raise PretrainedError(f"{where}: wrong shape for {key!r}: checkpoint {tuple(shape)}, model "
                                  f"{tuple(own[ours].shape)} ({ours})")
    derived = Sources()
    for ours, (get, shape, _) in targets.items():
        derived.get[ours], derived.shapes[ours] = get, tuple(shape)
    fresh = FRESH if policy.proprio_proj is not None else FRESH + ("proprio_proj.",)
    report = fill(policy, derived, derived.shapes, {k: k for k in derived.shapes}, {}, fresh, where)
    with torch.no_grad():
        policy.prefix.vision.dino.embeddings.mask_token.zero_()  # read only by masked-image pretraining
    report.source_tensors = len(source.shapes) + len(consumed_extra)
    report.consumed = {**consumed, **consumed_extra}
    return report
