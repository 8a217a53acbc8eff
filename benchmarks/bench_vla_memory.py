"""Peak memory and step time of a real-size flow VLA per training mode, against the prediction.

    nice -n 10 .venv/bin/python benchmarks/bench_vla_memory.py [--preset smolvla] [--batch 8]
        [--cases frozen_bf16_ckpt:rl,...,act] [--limit-gib 6] [--threads 1] [--out runs/vla_memory.jsonl]
    .venv/bin/python benchmarks/bench_vla_memory.py --table runs/vla_memory.jsonl

The preset (policies/vla/pretrained/presets.py) is built with random weights (no download), with
Flow-Noise exploration as pi_RL trains it. Each (mode, step) runs in a child process of its own,
so its peak resident memory (ru_maxrss) is its own; the row gives it less the child's resident
memory before the policy was built (Python, torch, transformers), next to the prediction of
policies/memory.py for the same plan. A case whose prediction does not fit --limit-gib (less
1 GiB for the process itself) is not run: the row says so (the refusal of `embodied train`).

  RL step   the learner's work on one minibatch: evaluate (a prefix forward and one expert forward
            over the stored chain of N Euler steps), the PPO loss, backward, clip, optimiser step;
            with a KL reference its no-grad log-probs too. The chain is random (act's output
            has the same shapes; its values do not change the cost)
  SFT step  sft_loss (flow matching), backward, clip, optimiser step
  act       act(deterministic=True) at 1 and 64 observations, no grad

Times are of the last of --steps steps (1 by default: that step also allocates the optimiser
state, which on a CPU costs little next to the step), wall and the process's CPU seconds (the
latter is what a busy machine changes least). On a CPU
they depend on the CPU and on what else runs on it: say which in the results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GiB = 1024 ** 3
# name -> (freeze, lora_rank, frozen_dtype, checkpointing, optimizer, kl_reference)
MODES = {
    "full": ("none", 0, "float32", False, "adam", False),
    "full_ckpt_8bit": ("none", 0, "float32", True, "adam_8bit", False),
    "frozen": ("vlm", 0, "float32", False, "adam", False),
    "frozen_bf16_ckpt": ("vlm", 0, "bfloat16", True, "adam_fused", False),
    "lora16_bf16_ckpt": ("none", 16, "bfloat16", True, "adam_fused", False),
    "frozen_bf16_ckpt_8bit_ref": ("vlm", 0, "bfloat16", True, "adam_8bit", True),
    # float32 frozen weights: on a CPU without bf16 instructions bf16 matmuls are several times slower
    "frozen_ckpt": ("vlm", 0, "float32", True, "adam_fused", False),
    "lora16_ckpt": ("none", 16, "float32", True, "adam_fused", False),
}
# (mode, step) in the order they run: the modes that fit one 24 GB GPU first
ORDER = ["frozen:sft", "frozen_bf16_ckpt:sft", "frozen_bf16_ckpt:rl", "lora16_bf16_ckpt:sft", "lora16_bf16_ckpt:rl",
         "frozen:rl", "full:rl", "full:sft", "full_ckpt_8bit:sft", "frozen_bf16_ckpt_8bit_ref:rl", "full_ckpt_8bit:rl",
         "act"]


def plan_of(mode: str, step: str, batch: int, autocast: bool = False):
    from policies.memory import Plan

    freeze, rank, dtype, ckpt, opt, ref = MODES[mode]
    return Plan(step=step, batch=batch, freeze=freeze, lora_rank=rank, frozen_dtype=dtype, checkpointing=ckpt,
                optimizer=opt, kl_reference=ref, autocast_bf16=autocast)


def preset_config(preset: str):
    """A real-size preset, or "tiny" (the toolkit's 64 px preset, to try this script quickly)."""
    from policies.vla.config import FlowVLAConfig
    from policies.vla.pretrained.presets import PRESETS

    if preset == "tiny":
        return FlowVLAConfig(noise_method="flow_noise")
    return dataclasses.replace(PRESETS[preset](), noise_method="flow_noise")  # pi_RL's exploration


def observations(cfg, batch: int, device):
    import torch

    size = cfg.vision["image_size"]
    g = torch.Generator().manual_seed(0)
    obs = {"state": torch.randn(batch, cfg.state_dim, generator=g),
           "instruction": ["pick up the red cube and put it in the box"] * batch,
           **{f"rgb_{c}": torch.randint(0, 256, (batch, size, size, 3), generator=g, dtype=torch.uint8)
              for c in cfg.cameras}}
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in obs.items()}


def random_replay(cfg, batch: int, device):
    """A stored chain of act's shapes: [B, N + 1, K, A_pad], every step stochastic (Flow-Noise)."""
    import torch

    chain = torch.randn(batch, cfg.num_steps + 1, cfg.chunk_size, cfg.max_action_dim, device=device)
    return {"chain": chain, "stochastic": torch.ones(batch, cfg.num_steps, dtype=torch.bool, device=device)}


def build(cfg, mode: str, device):
    """(policy with the mode's settings, optimiser, KL reference or None) on `device`."""
    import torch

    from policies.optim import make_optimizer
    from policies.vla.flow import FlowVLA
    from policies.vla.modes import apply_modes, shared_reference

    freeze, rank, dtype, ckpt, opt_name, ref = MODES[mode]
    with torch.device(device):
        policy = FlowVLA(cfg)
    apply_modes(policy, freeze, rank, dtype, ckpt)
    opt = make_optimizer([p for p in policy.parameters() if p.requires_grad], opt_name, lr=1e-5, weight_decay=0.0)
    return policy, opt, (shared_reference(policy) if ref else None)


def rl_step(policy, opt, obs, replay, reference=None, autocast=None):
    """One PPO minibatch step on `replay` (see the module doc)."""
    import contextlib

    import torch

    from embodied.rl.algorithms.ppo import kl_to_reference, ppo_policy_loss

    auto = autocast or contextlib.nullcontext()
    ref_lp = None
    if reference is not None:
        with torch.no_grad(), auto:
            ref_lp = reference.evaluate(obs, replay).log_prob.float()
    with auto:
        ev = policy.evaluate(obs, replay)
    lp = ev.log_prob.float()
    adv = torch.randn_like(lp)
    loss, _ = ppo_policy_loss(lp[:, None], lp.detach()[:, None] - 0.01, adv[:, None])
    if ref_lp is not None:
        loss = loss + 0.01 * kl_to_reference(lp[:, None], ref_lp[:, None], torch.ones_like(lp[:, None], dtype=torch.bool))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in policy.parameters() if p.requires_grad], 1.0)
    opt.step()
    return float(loss.detach())


def sft_step(policy, opt, obs, actions, autocast=None):
    import contextlib

    import torch

    with autocast or contextlib.nullcontext():
        loss = policy.sft_loss(obs, actions)
    opt.zero_grad(set_to_none=True)
    loss.float().backward()
    torch.nn.utils.clip_grad_norm_([p for p in policy.parameters() if p.requires_grad], 1.0)
    opt.step()
    return float(loss.detach())


def rss() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


class InUse:
    """Samples every 5 ms, in a thread, what the C allocator has handed out and not taken back
    (glibc's mallinfo2: uordblks + hblkhd; tensors, Python objects, libraries' buffers) and the
    resident memory; keeps their peaks. The difference is memory the allocator holds free but has
    not returned to the system. Stops the process (exit 3, one line) when the resident memory
    passes `stop_gib` (a job on a shared machine must keep under its share)."""

    def __init__(self, stop_gib: float = 0.0):
        import ctypes
        import threading

        class MallInfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                        "fsmblks", "uordblks", "fordblks", "keepcost")]

        try:
            self._info = ctypes.CDLL("libc.so.6").mallinfo2
            self._info.restype = MallInfo2
        except (OSError, AttributeError):  # not glibc >= 2.33: the in-use peak stays nan
            self._info = None
        self.stop_gib, self.peak, self.peak_rss, self._run = stop_gib, float("nan"), 0.0, True
        self.base = self.now()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def now(self) -> float:
        if self._info is None:
            return float("nan")
        m = self._info()
        return float(m.uordblks + m.hblkhd)

    def _loop(self) -> None:
        while self._run:
            used, res = self.now(), rss()
            self.peak = used if not self.peak >= used else self.peak
            self.peak_rss = max(self.peak_rss, res)
            if self.stop_gib and res > self.stop_gib * GiB:
                print(json.dumps({"result": f"stopped: resident memory {res / GiB:.2f} GiB passed --limit-gib "
                                            f"{self.stop_gib}; in use at most {(self.peak - self.base) / GiB:.2f} "
                                            "GiB above the start"}), flush=True)
                os._exit(3)
            time.sleep(0.005)

    def close(self) -> None:
        self._run = False
        self._thread.join()


def child(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = preset_config(args.preset)
    import embodied.rl.algorithms.ppo  # noqa: F401  (imports before the baseline: they are not the model's)
    import policies.optim  # noqa: F401
    import policies.vla.flow  # noqa: F401
    import policies.vla.modes  # noqa: F401
    if args.child != "act" and MODES[args.child.split(":")[0]][4] == "adam_8bit":
        import bitsandbytes  # noqa: F401
    if not args.keep_malloc:
        from policies.memory import return_freed_memory

        return_freed_memory()  # as `embodied train` / `sft` on a CPU (policies/memory.py check_device)
    base = rss()
    in_use = InUse(args.limit_gib)
    t0 = time.perf_counter()
    if args.child == "act":
        from policies.vla.flow import FlowVLA

        policy = FlowVLA(cfg).eval()
        out = {"case": "act", "build_s": time.perf_counter() - t0}
        for b in (1, 64):
            obs = observations(cfg, b, "cpu")
            ts, cs = [], []
            for _ in range(2 if b == 1 else 1):
                t, c = time.perf_counter(), time.process_time()
                with torch.no_grad():
                    policy.act(obs, deterministic=True)
                ts.append(time.perf_counter() - t)
                cs.append(time.process_time() - c)
            out[f"act_{b}_s"], out[f"act_{b}_cpu_s"] = min(ts), min(cs)
            out[f"act_{b}_peak_gib"] = (peak_rss() - base) / GiB
            print(json.dumps(out), flush=True)
        return out
    mode, step = args.child.split(":")
    policy, opt, ref = build(cfg, mode, "cpu")
    built, build_s = rss(), time.perf_counter() - t0
    print(f"built in {build_s:.0f} s", file=sys.stderr, flush=True)
    obs = observations(cfg, args.batch, "cpu")
    times, cpu, losses = [], [], []
    for _ in range(args.steps):
        t, c = time.perf_counter(), time.process_time()
        if step == "rl":
            losses.append(rl_step(policy, opt, obs, random_replay(cfg, args.batch, "cpu"), ref))
        else:
            actions = torch.rand(args.batch, cfg.chunk_size, cfg.action_dim) * 2 - 1
            losses.append(sft_step(policy, opt, obs, actions))
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        print(f"step {len(times)}: {times[-1]:.0f} s, {cpu[-1]:.0f} CPU s", file=sys.stderr, flush=True)
    in_use.close()
    return {"peak_in_use_gib": (in_use.peak - in_use.base) / GiB, "keep_malloc": args.keep_malloc,
            "step_cpu_s": cpu[-1], "case": args.child, "mode": mode, "step": step, "batch": args.batch, "build_s": build_s,
            "step_s": times[-1], "first_step_s": times[0], "samples_per_s": args.batch / times[-1],
            "peak_gib": (peak_rss() - base) / GiB, "after_build_gib": (built - base) / GiB, "base_gib": base / GiB,
            "losses": losses}


def parent(args) -> None:
    from policies.memory import predict

    cfg = preset_config(args.preset)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cases = args.cases.split(",")
    for case in cases:
        row = {"case": case, "preset": args.preset, "batch": args.batch, "threads": args.threads}
        if case != "act":
            mode, step = case.split(":")
            pred = predict("flow_vla", cfg, plan_of(mode, step, args.batch))
            row.update(mode=mode, step=step, predicted_gib=pred["total"] / GiB,
                       trainable_m=pred["trainable_params"] / 1e6, params_m=pred["params"] / 1e6)
            if pred["total"] / GiB > args.limit_gib - 0.5:
                row["result"] = f"not run: predicted {pred['total'] / GiB:.1f} GiB > {args.limit_gib - 0.5:.1f} GiB"
                print(json.dumps(row), flush=True)
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                continue
        cmd = [sys.executable, __file__, "--child", case, "--preset", args.preset, "--batch", str(args.batch),
               "--threads", str(args.threads), "--steps", str(args.steps), "--limit-gib", str(args.limit_gib)] + (["--keep-malloc"] * args.keep_malloc)
        t = time.perf_counter()
        try:
            with out.with_suffix(".stderr.log").open("a") as err:  # the children's progress and errors
                err.write(f"== {case}\n")
                err.flush()
                res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=args.case_timeout)
            lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
            got = json.loads(lines[-1]) if lines else {"result": f"exit {res.returncode} (see {err.name})"}
        except subprocess.TimeoutExpired as e:
            partial = [ln for ln in (e.stdout or b"").decode().splitlines() if ln.startswith("{")]
            got = json.loads(partial[-1]) if partial else {}
            got["result"] = f"timed out after {args.case_timeout} s"
        row.update(got)
        row["wall_s"] = time.perf_counter() - t
        print(json.dumps(row), flush=True)
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")


def table(path: str) -> None:
    """The rows of `path` as markdown, the prediction recomputed by this checkout's policies/memory.py."""
    from policies.memory import predict

    rows = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    for r in rows:
        if r["case"] != "act" and r["mode"] in MODES:
            cfg = preset_config(r["preset"])
            pred = predict("flow_vla", cfg, plan_of(r["mode"], r["step"], r["batch"]))
            r["predicted_gib"], r["predicted_first_gib"] = pred["total"] / GiB, pred["first_step"] / GiB
    print("| mode | step | steps run | trainable / all (M) | predicted peak GiB: first step / steady | measured peak "
          "GiB: resident (allocator in use) | s / step (CPU s) | samples/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r["case"] == "act":
            continue
        measured = f"{r['peak_gib']:.2f}" if "peak_gib" in r else r.get("result", "")
        if "peak_in_use_gib" in r:
            measured += f" ({r['peak_in_use_gib']:.2f})" + (", glibc's dynamic threshold" if r.get("keep_malloc") else "")
        speed = (f"{r['step_s']:.0f} ({r['step_cpu_s']:.0f}) | {r['samples_per_s']:.3f}" if "step_s" in r else " | ")
        first = f"{r['predicted_first_gib']:.2f}" if "predicted_first_gib" in r else "?"
        print(f"| {r['mode']} | {r['step']} | {len(r.get('losses', [])) or ''} | {r['trainable_m']:.0f} / "
              f"{r['params_m']:.0f} | {first} / {r['predicted_gib']:.2f} | {measured} | {speed} |")
    for r in rows:
        if r["case"] == "act":
            print(f"\nact latency (deterministic, {r.get('threads', 1)} thread(s)): one observation "
                  f"{r.get('act_1_s', float('nan')):.1f} s ({r.get('act_1_cpu_s', float('nan')):.1f} CPU s), 64 "
                  f"observations {r.get('act_64_s', float('nan')):.1f} s ({r.get('act_64_cpu_s', float('nan')):.1f} CPU s) "
                  f"(peak {r.get('act_64_peak_gib', r.get('act_1_peak_gib', float('nan'))):.2f} GiB) {r.get('result', '')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="smolvla")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--cases", default=",".join(ORDER), help="mode:rl, mode:sft or act, in order")
    ap.add_argument("--limit-gib", type=float, default=5.5,
                    help="a child stops when its resident memory passes this; cases predicted above it less 0.5 GiB "
                         "(the process itself) are not run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--keep-malloc", action="store_true",
                    help="leave glibc's mmap threshold dynamic (by default a child sets it as embodied train does on "
                         "a CPU: policies/memory.py return_freed_memory)")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--case-timeout", type=int, default=1200)
    ap.add_argument("--out", default="runs/vla_memory.jsonl")
    ap.add_argument("--table")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.table:
        table(args.table)
    elif args.child:
        print(json.dumps(child(args)), flush=True)
    else:
        parent(args)


if __name__ == "__main__":
    main()
