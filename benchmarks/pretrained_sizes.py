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
"""

from __future__ import annotations

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


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", choices=[n for n in PRESETS if n != "openvla"])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    latency(args.latency, args.threads) if args.latency else main()
