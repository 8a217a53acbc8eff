"""Learner throughput of the tiny VLAs: an RL update step (evaluate + clipped loss + backward
+ Adam) and a log-prob recomputation (evaluate without gradients), each relative to an SFT
step (sft_loss + backward + AdamW) on the same batch. Target: RL step <= 1.3x SFT step.

    .venv/bin/python benchmarks/bench_vla_rl.py [--batch 32] [--repeats 10] [--threads 2]

Prints one JSON line per policy: samples/s of each step kind (medians of alternated calls)
and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from embodied.rl.algorithms import ppo_policy_loss  # noqa: E402
from policies.vla.autoregressive import ARVLA  # noqa: E402
from policies.vla.config import ARVLAConfig, FlowVLAConfig  # noqa: E402
from policies.vla.flow import FlowVLA  # noqa: E402

POLICIES = {
    "flow_noise": lambda: FlowVLA(FlowVLAConfig(num_steps=4, noise_method="flow_noise")),
    "flow_sde": lambda: FlowVLA(FlowVLAConfig(num_steps=4, noise_method="flow_sde")),
    "ar": lambda: ARVLA(ARVLAConfig(temperature=1.6)),
}


def batch(B: int) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"state": torch.randn(B, 9, generator=g),
            "rgb_front": torch.randint(0, 256, (B, 64, 64, 3), generator=g, dtype=torch.uint8),
            "instruction": ["push the cube to the goal"] * B}


def interleaved(fns: list, repeats: int) -> list[float]:
    """Median seconds per call of each fn, timed in alternation (fn1, fn2, ..., fn1, ...) so
    that a change of machine load falls on all of them alike."""
    for fn in fns:
        fn()  # warm-up
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


def bench(name: str, B: int, repeats: int) -> dict:
    torch.manual_seed(0)
    policy = POLICIES[name]()
    obs = batch(B)
    out = policy.act(obs)
    actions = torch.rand(B, policy.chunk_size, 4) * 2 - 1
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    adv = torch.randn(B)

    def sft_step():
        loss = policy.sft_loss(obs, actions)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def rl_step():
        ev = policy.evaluate(obs, out.replay)
        loss, _ = ppo_policy_loss(ev.log_prob_parts.flatten(1), out.log_prob_parts.flatten(1),
                                  adv[:, None].expand(B, ev.log_prob_parts[0].numel()))
        opt.zero_grad()
        loss.backward()
        opt.step()

    def recompute():
        with torch.no_grad():
            policy.evaluate(obs, out.replay)

    t_sft, t_rl, t_re = interleaved([sft_step, rl_step, recompute], repeats)
    return {"policy": name, "batch": B, "sft_samples_per_s": round(B / t_sft, 1),
            "rl_samples_per_s": round(B / t_rl, 1), "recompute_samples_per_s": round(B / t_re, 1),
            "rl_step_over_sft_step": round(t_rl / t_sft, 3), "recompute_over_sft_step": round(t_re / t_sft, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps({"machine": platform.machine(), "cpus": os.cpu_count(), "threads": args.threads,
                      "torch": torch.__version__, "load": os.getloadavg()[0]}))
    for name in POLICIES:
        print(json.dumps(bench(name, args.batch, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
