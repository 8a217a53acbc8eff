"""Parameter counts of the real-size presets and memory estimates for RL on a GPU.

    .venv/bin/python benchmarks/pretrained_sizes.py

Counts come from the configs (policies/vla/pretrained/presets.py builds each policy on the
meta device: no weights are allocated). Memory is arithmetic, per the stated bytes per
parameter; activations of the backward pass (batch- and checkpointing-dependent) are not in it:
  rollout (bf16 weights)         2 B / parameter
  full RL fine-tune              16 B / parameter: fp32 weights, gradients and Adam's two moments
  frozen backbone                2 B / frozen backbone parameter (bf16) + 16 B / expert parameter
  LoRA r=16                      as frozen backbone, plus 16 B / adapter parameter (attention
                                 projections of the LM and the vision tower)
  KV cache                       prefix keys + values per sample in bf16: layers x 2 x kv heads x
                                 head width x prefix tokens (images + text) x 2 B
Each preset reads one camera (add a camera's patches to the KV cache for more). Prints a
markdown table (docs/benchmarks.md).

    .venv/bin/python benchmarks/pretrained_sizes.py --latency smolvla [--threads 1]

builds that preset on the CPU with random weights (our architecture at that size; it says
nothing of another implementation's speed) and times `act` at batch 1 (deterministic, the
preset's 10 Euler steps; median of 5 after one warm-up) and the prefix forward alone.

    .venv/bin/python benchmarks/pretrained_sizes.py --load-smolvla WORK

writes a real-size SmolVLA in LeRobot's layout with random weights into WORK and times
load_pretrained on it (and the run's peak memory).
"""

from __future__ import annotations

from pathlib import Path

import torch

from policies.vla.lora import apply_lora
from policies.vla.pretrained.presets import PRESETS, dinov2_vit_l14, parameter_count

GB = 1024 ** 3


def lora_params(config, rank: int = 16) -> int:
    from policies.vla.autoregressive import ARVLA
    from policies.vla.flow import FlowVLA

    with torch.device("meta"):
        policy = (FlowVLA if type(config).__name__ == "FlowVLAConfig" else ARVLA)(config)
        apply_lora(policy.prefix, rank)
    return sum(p.numel() for n, p in policy.prefix.named_parameters() if "lora_" in n)


def main() -> None:
    print("| preset | parameters | vision | LM | expert / head | rollout bf16 | full RL | frozen backbone "
          "| LoRA r=16 (+ adapters) | KV cache / sample |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, make in PRESETS.items():
        cfg = make()
        c = parameter_count(cfg)
        prefix = sum(v for k, v in c.items() if k.startswith("prefix"))
        rest = c["total"] - prefix
        lora = lora_params(cfg)
        lm = cfg.lm
        # the AR policy's actions are LM tokens: freezing its backbone leaves nothing to train
        frozen = "n/a" if rest == 0 else f"{(2 * prefix + 16 * rest) / GB:.1f} GiB"
        patches = (cfg.vision["image_size"] // cfg.vision["patch_size"]) ** 2 // max(cfg.pixel_shuffle, 1) ** 2
        tokens = len(cfg.cameras) * patches + cfg.max_text_len + int(getattr(cfg, "state_in_prefix", False))
        kv = lm["num_hidden_layers"] * 2 * lm["num_key_value_heads"] * lm.get(
            "head_dim", lm["hidden_size"] // lm["num_attention_heads"]) * tokens * 2
        print(f"| {name} | {c['total'] / 1e9:.3f} B | {c['prefix.vision'] / 1e6:.0f} M | {c['prefix.lm'] / 1e6:.0f} M "
              f"| {rest / 1e6:.0f} M | {2 * c['total'] / GB:.1f} GiB | {16 * c['total'] / GB:.1f} GiB "
              f"| {frozen} | {(2 * prefix + 16 * (rest + lora)) / GB:.1f} GiB "
              f"({lora / 1e6:.1f} M) | {kv / 2 ** 20:.1f} MiB ({tokens} tokens) |")
    print(f"\nOpenVLA's DINOv2 ViT-L/14 tower (not in ARVLA): {dinov2_vit_l14() / 1e6:.1f} M parameters")


def latency(name: str, threads: int) -> None:
    import statistics
    import time

    from policies.vla.flow import FlowVLA

    torch.set_num_threads(threads)
    cfg = PRESETS[name]()
    t0 = time.perf_counter()
    policy = FlowVLA(cfg).eval()
    built = time.perf_counter() - t0
    size = cfg.vision["image_size"]
    obs = {"state": torch.zeros(1, cfg.state_dim), "instruction": ["pick up the cube and place it in the box"],
           **{f"rgb_{c}": torch.randint(0, 256, (1, size, size, 3), dtype=torch.uint8) for c in cfg.cameras}}
    times, prefix = [], []
    with torch.no_grad():
        for i in range(6):
            t = time.perf_counter()
            policy.act(obs, deterministic=True)
            times.append(time.perf_counter() - t)
            t = time.perf_counter()
            policy.encode(obs)
            prefix.append(time.perf_counter() - t)
    print(f"{name}: built in {built:.0f} s; act batch 1, {cfg.num_steps} steps, {threads} thread(s): "
          f"median {statistics.median(times[1:]):.2f} s (prefix forward {statistics.median(prefix[1:]):.2f} s)")


def load_time(work: Path) -> None:
    """Write a real-size SmolVLA in LeRobot's layout (random weights from transformers' own
    SmolVLM and Llama classes, tests/pretrained_ckpt_smolvla.py) and time the strict load."""
    import resource
    import sys
    import time

    from safetensors.torch import save_file

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pretrained_ckpt import write_processors, write_tokenizer
    from pretrained_ckpt_smolvla import real_size_smolvla_keys
    from policies.vla.pretrained import load_pretrained

    torch.set_num_threads(1)
    ckpt, vlm = work / "smolvla", work / "smolvlm2"
    ckpt.mkdir(parents=True, exist_ok=True)
    with torch.device("cpu"):
        tensors = {k: torch.randn(v.shape) * 0.02 for k, v in real_size_smolvla_keys().items()}
    save_file(tensors, str(ckpt / "model.safetensors"))
    size = sum(t.numel() for t in tensors.values())
    del tensors
    from transformers import SmolVLMConfig

    SmolVLMConfig(vision_config=dict(model_type="smolvlm_vision", hidden_size=768, intermediate_size=3072,
                                     num_hidden_layers=12, num_attention_heads=12, image_size=512, patch_size=16),
                  text_config=dict(model_type="llama", vocab_size=49280, hidden_size=960, intermediate_size=2560,
                                   num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5, head_dim=64,
                                   rms_norm_eps=1e-5), scale_factor=4).save_pretrained(str(vlm))
    write_tokenizer(vlm)
    norm_map = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    feats = {"observation.images.top": {"type": "VISUAL", "shape": [3, 512, 512]},
             "observation.state": {"type": "STATE", "shape": [5]}}
    (ckpt / "config.json").write_text(__import__("json").dumps(
        {"type": "smolvla", "input_features": feats, "output_features": {"action": {"type": "ACTION", "shape": [4]}},
         "normalization_mapping": norm_map, "chunk_size": 50}))
    write_processors(ckpt, norm_map)
    imap = {"cameras": {"observation.images.top": "front"}, "state_indices": [0, 1, 2, 3, 4], "action_dim": 4,
            "chunk_size": 50}
    t = time.perf_counter()
    policy = load_pretrained(ckpt, imap, vlm)
    took = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    print(f"smolvla: {size / 1e6:.0f} M checkpoint values; load_pretrained {took:.0f} s "
          f"({policy.load_report.summary()}); peak RSS of the whole run {peak:.1f} GiB")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", choices=[n for n in PRESETS if n != "openvla"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--load-smolvla", type=Path, metavar="WORK", help="time a strict load at SmolVLA's real size")
    args = ap.parse_args()
    if args.load_smolvla:
        load_time(args.load_smolvla)
    else:
        latency(args.latency, args.threads) if args.latency else main()
