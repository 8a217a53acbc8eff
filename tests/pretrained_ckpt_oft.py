"""Tiny OpenVLA-OFT checkpoints in the released layout, and OFT's inference recomputed from the
released tensors, for tests/policies/test_pretrained_oft.py.

The files are those OFT's fine-tuning script writes (Prismatic config.json, the VLA's safetensors
in shards with their index, lora_adapter/ in PEFT's layout, action_head--*.pt and
proprio_projector--*.pt as DDP state dicts, dataset_statistics.json, a Llama-style tokenizer).
The vision towers' tensors carry timm's names (OpenVLA's towers are timm ViTs: DINOv2-L/14 with 4
registers, SigLIP so400m/14 with its attention-pooling head) at tiny widths; the LM's come from
transformers' LlamaForCausalLM. `OFTReference` computes OFT's forward from these tensors as timm's
ViT blocks, OpenVLA's projector, OFT's proprio projector, LLama (transformers, with a fully open
attention mask) and OFT's MLPResNet head do, written here independently of policies/vla, one
row at a time as OFT's predict_action runs (batch 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

IMAGE, PATCH, DEPTH = 28, 14, 3  # towers of 3 blocks (OpenVLA reads the 2nd)
DINO_W, SIG_W, LM_W, VOCAB = 64, 72, 64, 64
ACTION, STATE, CHUNK = 4, 5, 3
LORA_R, LORA_ALPHA = 4, 2.0
VISION_IDS = ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"]
WORDS = ("In : What action should the robot take to ? Out "
         "push pick place a red green blue cube square onto reach lift").split()
TEXT = dict(vocab_size=VOCAB, hidden_size=LM_W, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=512, hidden_act="silu")
# LoRA-adapted Linears (a few of OFT's all-linear targets), PEFT names without the "base_model.model." prefix
LORA = ["vision_backbone.featurizer.blocks.0.attn.qkv", "vision_backbone.fused_featurizer.blocks.1.mlp.fc1",
        "projector.fc2", "language_model.model.layers.0.self_attn.q_proj", "language_model.model.layers.1.mlp.down_proj"]


def _tower(g: torch.Generator, prefix: str, width: int, mlp: int, dino: bool) -> dict[str, torch.Tensor]:
    def w(*shape, std=None):
        return torch.randn(*shape, generator=g) * (std if std is not None else shape[-1] ** -0.5)

    t = {prefix + "patch_embed.proj.weight": w(width, 3, PATCH, PATCH, std=(3 * PATCH * PATCH) ** -0.5),
         prefix + "patch_embed.proj.bias": w(width, std=0.1),
         prefix + "pos_embed": w(1, (IMAGE // PATCH) ** 2, width, std=0.5),
         prefix + "norm.weight": 1 + w(width, std=0.2), prefix + "norm.bias": w(width, std=0.1)}
    if dino:
        t[prefix + "cls_token"], t[prefix + "reg_token"] = w(1, 1, width, std=0.5), w(1, 4, width, std=0.5)
    for i in range(DEPTH):
        b = f"{prefix}blocks.{i}."
        t.update({b + "norm1.weight": 1 + w(width, std=0.2), b + "norm1.bias": w(width, std=0.1),
                  b + "attn.qkv.weight": w(3 * width, width), b + "attn.qkv.bias": w(3 * width, std=0.1),
                  b + "attn.proj.weight": w(width, width), b + "attn.proj.bias": w(width, std=0.1),
                  b + "norm2.weight": 1 + w(width, std=0.2), b + "norm2.bias": w(width, std=0.1),
                  b + "mlp.fc1.weight": w(mlp, width), b + "mlp.fc1.bias": w(mlp, std=0.1),
                  b + "mlp.fc2.weight": w(width, mlp), b + "mlp.fc2.bias": w(width, std=0.1)})
        if dino:
            t[b + "ls1.scale_factor"], t[b + "ls2.scale_factor"] = 0.5 + w(width, std=0.1), 0.5 + w(width, std=0.1)
    if not dino:  # timm's attention pooling ("map" global pool): present in the file, never read by OpenVLA
        a = prefix + "attn_pool."
        t.update({a + "latent": w(1, 1, width), a + "q.weight": w(width, width), a + "q.bias": w(width),
                  a + "kv.weight": w(2 * width, width), a + "kv.bias": w(2 * width), a + "proj.weight": w(width, width),
                  a + "proj.bias": w(width), a + "norm.weight": 1 + w(width), a + "norm.bias": w(width),
                  a + "mlp.fc1.weight": w(mlp, width), a + "mlp.fc1.bias": w(mlp), a + "mlp.fc2.weight": w(width, mlp),
                  a + "mlp.fc2.bias": w(width)})
    return t


class OFTReference:
    """A tiny OpenVLA-OFT: `base` tensors (the model fine-tuned), a LoRA adapter, the merged
    tensors OFT saves, the L1 head and the proprio projector."""

    def __init__(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)

        def w(*shape, std=None):
            return torch.randn(*shape, generator=g) * (std if std is not None else shape[-1] ** -0.5)

        self.base = {**_tower(g, "vision_backbone.featurizer.", DINO_W, 4 * DINO_W, True),
                     **_tower(g, "vision_backbone.fused_featurizer.", SIG_W, 96, False)}
        fused = DINO_W + SIG_W
        self.base.update({"projector.fc1.weight": w(4 * fused, fused), "projector.fc1.bias": w(4 * fused, std=0.1),
                          "projector.fc2.weight": w(LM_W, 4 * fused), "projector.fc2.bias": w(LM_W, std=0.1),
                          "projector.fc3.weight": w(LM_W, LM_W), "projector.fc3.bias": w(LM_W, std=0.1)})
        lm = LlamaForCausalLM(LlamaConfig(**TEXT))
        with torch.no_grad():
            for name, p in lm.named_parameters():
                if "norm" in name:
                    p.normal_(1.0, 0.2, generator=g)
        self.base.update({"language_model." + k: v.detach().clone() for k, v in lm.state_dict().items()})
        self.adapter = {}
        for m in LORA:
            out, inp = self.base[m + ".weight"].shape
            self.adapter[f"base_model.model.{m}.lora_A.weight"] = w(LORA_R, inp)
            self.adapter[f"base_model.model.{m}.lora_B.weight"] = w(out, LORA_R, std=0.2)
        self.merged = dict(self.base)
        for m in LORA:  # W + (alpha / r) B A, PEFT's merge
            a, b = self.adapter[f"base_model.model.{m}.lora_A.weight"], self.adapter[f"base_model.model.{m}.lora_B.weight"]
            self.merged[m + ".weight"] = self.base[m + ".weight"] + LORA_ALPHA / LORA_R * b @ a
        hw = LM_W * ACTION
        self.head = {"model.layer_norm1.weight": 1 + w(hw, std=0.2), "model.layer_norm1.bias": w(hw, std=0.1),
                     "model.fc1.weight": w(LM_W, hw), "model.fc1.bias": w(LM_W, std=0.1),
                     "model.layer_norm2.weight": 1 + w(LM_W, std=0.2), "model.layer_norm2.bias": w(LM_W, std=0.1),
                     "model.fc2.weight": w(ACTION, LM_W), "model.fc2.bias": w(ACTION, std=0.1)}
        for i in range(2):
            self.head.update({f"model.mlp_resnet_blocks.{i}.ffn.0.weight": 1 + w(LM_W, std=0.2),
                              f"model.mlp_resnet_blocks.{i}.ffn.0.bias": w(LM_W, std=0.1),
                              f"model.mlp_resnet_blocks.{i}.ffn.1.weight": w(LM_W, LM_W),
                              f"model.mlp_resnet_blocks.{i}.ffn.1.bias": w(LM_W, std=0.1)})
        self.proprio = {"fc1.weight": w(LM_W, STATE), "fc1.bias": w(LM_W, std=0.1), "fc2.weight": w(LM_W, LM_W),
                        "fc2.bias": w(LM_W, std=0.1)}
        self.stats = {}
        for key in ("tiny_task", "other_task"):
            s = {}
            for part, dim in (("action", ACTION), ("proprio", STATE)):
                lo = torch.rand(dim, generator=g) * -0.5 - 0.2
                hi = torch.rand(dim, generator=g) * 0.5 + 0.2
                s[part] = {"q01": lo.tolist(), "q99": hi.tolist(), "min": (lo - 0.1).tolist(), "max": (hi + 0.1).tolist(),
                           "mean": ((lo + hi) / 2).tolist(), "std": ((hi - lo) / 4).tolist(),
                           "mask": [True] * (dim - 1) + [part == "proprio"]}
            s["num_transitions"], s["num_trajectories"] = 100, 5
            self.stats[key] = s
        self.lm = LlamaForCausalLM(LlamaConfig(**TEXT)).model.eval()
        self.lm.load_state_dict({k[len("language_model.model."):]: v for k, v in self.merged.items()
                                 if k.startswith("language_model.model.")})

    # -- OFT's inference, from the released tensors -------------------------------------------
    def vit(self, prefix: str, img: torch.Tensor, dino: bool) -> torch.Tensor:
        """timm's ViT forward up to the second-to-last block (get_intermediate_layers), prefix tokens dropped."""
        t = {k[len(prefix):]: v for k, v in self.merged.items() if k.startswith(prefix)}
        x = F.conv2d(img, t["patch_embed.proj.weight"], t["patch_embed.proj.bias"], stride=PATCH).flatten(2).transpose(1, 2)
        x = x + t["pos_embed"]
        B, width = x.shape[0], x.shape[-1]
        if dino:  # no_embed_class: class and register tokens join after the position embedding
            x = torch.cat([t["cls_token"].expand(B, -1, -1), t["reg_token"].expand(B, -1, -1), x], dim=1)
        heads = width // (64 if dino else 72)
        for i in range(DEPTH - 1):
            b = lambda n: t[f"blocks.{i}.{n}"]  # noqa: E731
            h = F.layer_norm(x, (width,), b("norm1.weight"), b("norm1.bias"), 1e-6)
            qkv = F.linear(h, b("attn.qkv.weight"), b("attn.qkv.bias"))
            qkv = qkv.reshape(B, x.shape[1], 3, heads, -1).permute(2, 0, 3, 1, 4)  # q, k, v rows, as timm
            a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2]).transpose(1, 2).reshape(B, x.shape[1], width)
            a = F.linear(a, b("attn.proj.weight"), b("attn.proj.bias"))
            x = x + (a * b("ls1.scale_factor") if dino else a)
            h = F.layer_norm(x, (width,), b("norm2.weight"), b("norm2.bias"), 1e-6)
            m = F.linear(F.gelu(F.linear(h, b("mlp.fc1.weight"), b("mlp.fc1.bias"))), b("mlp.fc2.weight"), b("mlp.fc2.bias"))
            x = x + (m * b("ls2.scale_factor") if dino else m)
        return x[:, 5:] if dino else x

    def head_forward(self, h: torch.Tensor) -> torch.Tensor:
        t = self.head
        x = F.layer_norm(h, (h.shape[-1],), t["model.layer_norm1.weight"], t["model.layer_norm1.bias"])
        x = F.relu(F.linear(x, t["model.fc1.weight"], t["model.fc1.bias"]))
        for i in range(2):
            p = f"model.mlp_resnet_blocks.{i}.ffn."
            h = F.layer_norm(x, (LM_W,), t[p + "0.weight"], t[p + "0.bias"])
            x = x + F.relu(F.linear(h, t[p + "1.weight"], t[p + "1.bias"]))
        x = F.layer_norm(x, (LM_W,), t["model.layer_norm2.weight"], t["model.layer_norm2.bias"])
        return F.linear(x, t["model.fc2.weight"], t["model.fc2.bias"])

    @torch.no_grad()
    def actions(self, tokenizer, images: list[torch.Tensor], state: torch.Tensor, task: str,
                unnorm_key: str = "tiny_task") -> torch.Tensor:
        """One row: images uint8 [H, W, 3] per camera, raw state [STATE] -> unnormalised chunk [K, A]
        (clamped to [-1, 1], the toolkit's env contract)."""
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        feats = []
        for im in images:
            x = im.permute(2, 0, 1)[None].float() / 255.0
            d = self.vit("vision_backbone.featurizer.", (x - mean) / std, True)
            s = self.vit("vision_backbone.fused_featurizer.", (x - 0.5) / 0.5, False)
            feats.append(torch.cat([d, s], dim=-1))
        t = self.merged
        p = torch.cat(feats, dim=1)
        p = F.gelu(F.linear(p, t["projector.fc1.weight"], t["projector.fc1.bias"]))
        p = F.linear(p, t["projector.fc2.weight"], t["projector.fc2.bias"])
        p = F.linear(F.gelu(p), t["projector.fc3.weight"], t["projector.fc3.bias"])
        st = self.stats[unnorm_key]
        lo, hi = (torch.tensor(st["proprio"][q], dtype=torch.float64) for q in ("q01", "q99"))
        s = state.double()
        s = torch.where(torch.tensor(st["proprio"]["mask"]), 2 * (s - lo) / (hi - lo + 1e-8) - 1, s).clamp(-1, 1).float()
        q = self.proprio
        prop = F.linear(F.gelu(F.linear(s, q["fc1.weight"], q["fc1.bias"])), q["fc2.weight"], q["fc2.bias"])
        p = torch.cat([p, prop[None, None]], dim=1)  # the proprio token after the patches
        ids = tokenizer(f"In: What action should the robot take to {task.lower()}?\nOut:")["input_ids"]
        empty = tokenizer.convert_tokens_to_ids("\u2581")
        if ids[-1] != empty:
            ids = ids + [empty]
        n_prompt, M = len(ids) - 1, CHUNK * ACTION
        ids = torch.tensor(ids + [1] * M + [tokenizer.eos_token_id])
        emb = self.lm.embed_tokens(ids)[None].clone()
        emb[:, n_prompt + 1:n_prompt + 1 + M] = 0.0  # the action tokens' inputs are zeroed
        seq = torch.cat([emb[:, :1], p, emb[:, 1:]], dim=1)
        T = seq.shape[1]
        hidden = self.lm(inputs_embeds=seq, attention_mask=torch.zeros(1, 1, T, T), position_ids=torch.arange(T)[None]
                         ).last_hidden_state
        n_patches = p.shape[1]
        h = hidden[0, n_patches + n_prompt:n_patches + n_prompt + M]  # OFT's slice
        a = self.head_forward(h.reshape(CHUNK, ACTION * LM_W)).double()
        lo, hi = (torch.tensor(st["action"][q], dtype=torch.float64) for q in ("q01", "q99"))
        a = torch.where(torch.tensor(st["action"]["mask"]), 0.5 * (a + 1) * (hi - lo + 1e-8) + lo, a)
        return a.clamp(-1, 1).float()


def write_tokenizer(path: Path) -> Path:
    """A word-level Llama-style tokenizer: <s> first, </s> as eos, "\u2581" as Llama's empty token."""
    words = ["<unk>", "<s>", "</s>", "\u2581", "<pad>", *WORDS]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>").save_pretrained(str(path))
    return path


def _config(path: Path) -> None:
    config = {"model_type": "openvla", "architectures": ["OpenVLAForActionPrediction"],
              "vision_backbone_id": "dinosiglip-vit-so-224px", "llm_backbone_id": "llama2-7b-pure",
              "arch_specifier": "no-align+fused-gelu-mlp", "use_fused_vision_backbone": True,
              "image_resize_strategy": "resize-naive", "timm_model_ids": VISION_IDS,
              "timm_override_act_layers": [None, None], "image_sizes": [IMAGE, IMAGE], "n_action_bins": 256,
              "pad_token_id": 4, "pad_to_multiple_of": 64, "text_config": {"model_type": "llama", **TEXT}}
    (path / "config.json").write_text(json.dumps(config, indent=2))


def write_oft(path: Path, ref: OFTReference, adapter_only: bool = False) -> Path:
    """An OFT checkpoint directory: merged weights in two shards plus the adapter (OFT's default
    save), or with adapter_only the adapter without weights (then load with base=write_base(...))."""
    path.mkdir(parents=True, exist_ok=True)
    _config(path)
    write_tokenizer(path)
    if not adapter_only:
        lm = {k for k in ref.merged if k.startswith("language_model.")}
        shards = {"model-00001-of-00002.safetensors": {k: v for k, v in ref.merged.items() if k not in lm},
                  "model-00002-of-00002.safetensors": {k: v for k, v in ref.merged.items() if k in lm}}
        for name, tensors in shards.items():
            save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / name))
        (path / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {}, "weight_map": {k: n for n, t in shards.items() for k in t}}))
    (path / "lora_adapter").mkdir(exist_ok=True)
    (path / "lora_adapter" / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": LORA_R, "lora_alpha": LORA_ALPHA, "target_modules": "all-linear", "lora_dropout": 0.0,
         "bias": "none", "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "modules_to_save": None,
         "init_lora_weights": "gaussian", "base_model_name_or_path": "openvla/openvla-7b", "task_type": None}))
    save_file(ref.adapter, str(path / "lora_adapter" / "adapter_model.safetensors"))
    torch.save({"module." + k: v for k, v in ref.head.items()}, path / "action_head--150000_checkpoint.pt")
    torch.save({"module." + k: v for k, v in ref.proprio.items()}, path / "proprio_projector--150000_checkpoint.pt")
    (path / "dataset_statistics.json").write_text(json.dumps(ref.stats))
    return path


def write_base(path: Path, ref: OFTReference) -> Path:
    """The model an adapter was trained on, as one model.safetensors (openvla-7b's layout)."""
    path.mkdir(parents=True, exist_ok=True)
    _config(path)
    save_file({k: v.contiguous() for k, v in ref.base.items()}, str(path / "model.safetensors"))
    return path


def real_size_oft_keys() -> dict[str, torch.Tensor]:
    """Names and shapes (meta tensors, no memory) of a released OpenVLA-OFT LIBERO checkpoint:
    DINOv2-L/14 (4 registers, 24 blocks) and SigLIP so400m/14 (27 blocks, pooling head) at 224 px,
    OpenVLA's projector, Llama-2-7B with 32064 tokens; the L1 head for 7 actions and proprio 8."""
    def vit(prefix, width, mlp, depth, dino):
        t = {prefix + "patch_embed.proj.weight": (width, 3, 14, 14), prefix + "patch_embed.proj.bias": (width,),
             prefix + "pos_embed": (1, 256, width), prefix + "norm.weight": (width,), prefix + "norm.bias": (width,)}
        if dino:
            t.update({prefix + "cls_token": (1, 1, width), prefix + "reg_token": (1, 4, width)})
        for i in range(depth):
            b = f"{prefix}blocks.{i}."
            for n, shape in (("norm1", (width,)), ("norm2", (width,)), ("attn.qkv", (3 * width, width)),
                             ("attn.proj", (width, width)), ("mlp.fc1", (mlp, width)), ("mlp.fc2", (width, mlp))):
                t[b + n + ".weight"], t[b + n + ".bias"] = shape, shape[:1]
            if dino:
                t[b + "ls1.scale_factor"], t[b + "ls2.scale_factor"] = (width,), (width,)
        if not dino:
            a = prefix + "attn_pool."
            t[a + "latent"] = (1, 1, width)
            for n, shape in (("q", (width, width)), ("kv", (2 * width, width)), ("proj", (width, width)),
                             ("norm", (width,)), ("mlp.fc1", (mlp, width)), ("mlp.fc2", (width, mlp))):
                t[a + n + ".weight"], t[a + n + ".bias"] = shape, shape[:1]
        return t

    shapes = {**vit("vision_backbone.featurizer.", 1024, 4096, 24, True),
              **vit("vision_backbone.fused_featurizer.", 1152, 4304, 27, False),
              "projector.fc1.weight": (8704, 2176), "projector.fc1.bias": (8704,), "projector.fc2.weight": (4096, 8704),
              "projector.fc2.bias": (4096,), "projector.fc3.weight": (4096, 4096), "projector.fc3.bias": (4096,)}
    with torch.device("meta"):
        lm = LlamaForCausalLM(LlamaConfig(vocab_size=32064, hidden_size=4096, intermediate_size=11008,
                                          num_hidden_layers=32, num_attention_heads=32))
    shapes.update({"language_model." + k: tuple(v.shape) for k, v in lm.state_dict().items()})
    head = {"model.layer_norm1.weight": (28672,), "model.layer_norm1.bias": (28672,), "model.fc1.weight": (4096, 28672),
            "model.fc1.bias": (4096,), "model.layer_norm2.weight": (4096,), "model.layer_norm2.bias": (4096,),
            "model.fc2.weight": (7, 4096), "model.fc2.bias": (7,)}
    for i in range(2):
        b = f"model.mlp_resnet_blocks.{i}.ffn."
        head.update({b + "0.weight": (4096,), b + "0.bias": (4096,), b + "1.weight": (4096, 4096), b + "1.bias": (4096,)})
    shapes.update({"action_head:" + k: v for k, v in head.items()})
    shapes.update({"proprio_projector:fc1.weight": (4096, 8), "proprio_projector:fc1.bias": (4096,),
                   "proprio_projector:fc2.weight": (4096, 4096), "proprio_projector:fc2.bias": (4096,)})
    return {k: torch.empty(v, device="meta") for k, v in shapes.items()}
