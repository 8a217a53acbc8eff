"""`make gpu-check`: what the toolkit does on one GPU, in one run, as one table.

    python benchmarks/gpu_check.py [--out runs/gpu_check/table.md] [--parts tests,env,vla,pipeline,ppo,vla_smol]
                                   [--budget 450] [--baseline PATH/TO/ManiSkill/ppo.py] [--dry-run]

Parts, each in a child process under its own time limit (a part that runs out keeps the rows
it printed so far and says so; the limits are scaled down to fit --budget seconds in all), in
this order: the simulator parts (benchmarks/gpu_check_sim.py), then the VLA parts
(benchmarks/gpu_check_vla.py):
  warp_env  our MuJoCo tasks on MuJoCo Warp (env.backend=warp, sims/mujoco/warp_env.py): PushCube
            env steps/s at 1024, 4096 and 16384 worlds from state and at 1024 with 64 px RGB, against
            the C backend (mujoco.batch) on all of the machine's CPUs in the same run
  warp_ppo  state PPO on PushCube with 4096 warp envs on the GPU: wall time to 90% eval success
  warp_grpo flow-VLA GRPO from 64 px pixels on ReachPoint with 1024 warp envs (a fresh tiny VLA,
            no SFT start): env steps/s of the whole training loop and the eval success reached
  tests     every test marked `cuda` (pytest -m cuda), none may be skipped
  env       ManiSkill physx_cuda PickCube-v1 env steps/s at 1024 and 4096 envs: our adapter
            (sims/maniskill) against bare ManiSkill stepped in the same run
  pipeline  synchronous against pipelined rollout with the policy on the GPU
            (benchmarks/bench_pipeline.py, train.device=cuda)
  ppo       state PPO on PickCube-v1 with 1024 envs on the GPU: wall time to 90% eval success,
            ours (`embodied train`, train.device=cuda) against ManiSkill's PPO baseline
            (examples/baselines/ppo/ppo.py of the ManiSkill repository, not part of this project:
            --baseline points at a copy; without it the row quotes the baseline's published settings)
  vla       the flow VLA at pi0's size (policies/vla/pretrained/presets.py, random weights, bf16
            autocast): act latency for one observation, RL step and SFT step samples/s, peak memory
  vla_smol  the flow VLA at SmolVLA's size per training mode (policies/vla/modes.py; the modes of
            benchmarks/bench_vla_memory.py): peak memory at batch 32 (target: within 22 GiB), then
            the largest batch that fits (the largest that policies/memory.py predicts to fit, halved
            on out-of-memory) with RL-step and SFT-step samples/s and measured against predicted
            peak; act latency at 1 and 64 observations. A mode with 8-bit Adam needs bitsandbytes
            (gpu_bundle.sh carries it): without it, or when it does not load, the mode's row says so
            in one line and the other modes run
  vla_pi0   the same at pi0's size (target: RL at batch >= 64 and >= 100 samples/s with the VLM
            frozen or LoRA-adapted)
Without a CUDA device it prints which parts it skipped and why, and exits 0 (--dry-run: the warp
parts on warp's CPU device at 1/64 size and the vla_* parts with the tiny preset on the CPU). The
table (markdown, with machine, date and commit) is printed and written to --out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from gpu_check_common import DRY, ROOT
from gpu_check_sim import (part_env, part_pipeline, part_ppo, part_tests, part_warp_env, part_warp_grpo,
                           part_warp_ppo)
from gpu_check_vla import part_vla, part_vla_pi0, part_vla_smol

# seconds each, before scaling to --budget; the last part also gets what the others left unused
# (the simulator parts first, then the VLA parts)
PARTS = {"warp_env": 150, "warp_ppo": 150, "warp_grpo": 90, "tests": 60, "env": 65, "pipeline": 30, "ppo": 260,
         "vla": 55, "vla_smol": 150, "vla_pi0": 210}
WARP_PARTS = ("warp_env", "warp_ppo", "warp_grpo")  # need mujoco_warp and warp
VLA_PARTS = ("vla_smol", "vla_pi0")  # --dry-run: the tiny preset on the CPU
MS_PARTS = ("env", "ppo")  # need mani_skill / sapien (the tests part reports its own skips)

FUNCS = {"warp_env": part_warp_env, "warp_ppo": part_warp_ppo, "warp_grpo": part_warp_grpo, "tests": part_tests,
         "env": part_env, "vla": part_vla, "pipeline": part_pipeline, "ppo": part_ppo, "vla_smol": part_vla_smol,
         "vla_pi0": part_vla_pi0}


def machine() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            return f"{p.name} ({p.total_memory / 2 ** 30:.0f} GiB), torch {torch.__version__}, {os.cpu_count()} CPUs"
        return f"no CUDA device; torch {torch.__version__}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()})"
    except ImportError:
        return "no torch"


def commit() -> str:
    if os.environ.get("GPU_CHECK_COMMIT"):  # a copy of the tree without its .git (a device machine)
        return os.environ["GPU_CHECK_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip() or os.environ.get("GPU_CHECK_COMMIT", "unknown")
    except OSError:
        return os.environ.get("GPU_CHECK_COMMIT", "unknown")


def skip_reason(part: str) -> str | None:
    import importlib.util

    import torch

    if DRY and part not in WARP_PARTS + VLA_PARTS:
        return "--dry-run runs the warp and vla_* mode parts only"
    if not torch.cuda.is_available() and not DRY:
        return "no CUDA device"
    if part in WARP_PARTS:
        for mod in ("warp", "mujoco_warp"):
            if importlib.util.find_spec(mod) is None:
                return f"{mod} is not installed (pip install -c constraints.txt mujoco-warp warp-lang)"
        return None
    if part in MS_PARTS:
        for mod in ("mani_skill", "sapien"):
            if importlib.util.find_spec(mod) is None:
                return f"{mod} is not installed (make gpu-bundle; see docs/gpu.md)"
    if part in ("env", "ppo"):  # physx_cuda; the tests part runs and reports its skips
        sys.path.insert(0, str(ROOT))
        from sims.maniskill.backend import physx_gpu_error

        return physx_gpu_error()
    return None


def run_part(name: str, limit: float, args) -> tuple[list[list[str]], str]:
    cmd = [sys.executable, __file__, "--part", name, "--limit", f"{limit:.0f}"]
    if args.baseline:
        cmd += ["--baseline", args.baseline]
    t = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    rows, status = [], "ok"
    try:
        out, _ = proc.communicate(timeout=limit + 15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        status = f"timed out after {limit + 15:.0f} s"
    for line in out.splitlines():
        if line.startswith("ROW "):
            rows.append(json.loads(line[4:]))
        else:
            print(f"  [{name}] {line}")
    if proc.returncode not in (0, None) and status == "ok":
        last = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("ROW ")][-1:]
        status = f"exit {proc.returncode}: {last[0][:160] if last else ''}"
    return rows, f"{status}; {time.perf_counter() - t:.0f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/gpu_check/table.md")
    ap.add_argument("--parts", default=",".join(PARTS), help="name[:seconds],... (default limits: %s)" % PARTS)
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for all parts together")
    ap.add_argument("--baseline", default=os.environ.get("MS_PPO_BASELINE"), help="ManiSkill's ppo.py (a copy)")
    ap.add_argument("--dry-run", action="store_true", help="the warp parts on warp's CPU device at 1/64 size")
    ap.add_argument("--part", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=float, default=60.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dry_run and not DRY:  # the parts are child processes: they read it from the environment
        os.environ["GPU_CHECK_DRY"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if args.part:  # child: one part
        fn = FUNCS[args.part]
        fn(args.limit, args.baseline) if args.part == "ppo" else fn(args.limit)
        return 0
    asked = dict((p.split(":") + [None])[:2] for p in args.parts.split(",") if p)  # name[:seconds]
    parts = list(asked)
    limits = {p: float(asked[p]) if asked[p] else PARTS.get(p, 0) for p in parts}
    bad = sorted(set(parts) - set(PARTS))
    if bad:
        print(f"--parts: unknown {bad}; allowed: {', '.join(PARTS)}", file=sys.stderr)
        return 2
    reasons = {p: skip_reason(p) for p in parts}  # first: a skipped part's time goes to the others
    running = [p for p in parts if reasons[p] is None]
    scale = min(1.0, args.budget / max(sum(limits[p] for p in running), 1))
    t0 = time.perf_counter()
    rows, status = [], {}
    for n, p in enumerate(parts):
        reason = reasons[p]
        if reason:
            status[p] = f"skipped: {reason}"
            print(f"gpu-check: {p} skipped: {reason}", flush=True)
            continue
        left = args.budget - (time.perf_counter() - t0)
        after = sum(limits[q] * scale for q in running[running.index(p) + 1:])
        limit = min(max(limits[p] * scale, left - after - 15), max(left - 15, 10))
        print(f"gpu-check: {p} (limit {limit:.0f} s)", flush=True)
        got, status[p] = run_part(p, limit, args)
        rows += got
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"gpu-check: {machine()}; commit {commit()}; {when}; "
             f"`python benchmarks/gpu_check.py --parts {','.join(parts)}`; {time.perf_counter() - t0:.0f} s", "",
             "| part | what | value | target / reference | note |", "| --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    lines += [f"| {p} | (part) | {s} | | |" for p, s in status.items()]
    table = "\n".join(lines)
    print("\n" + table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table + "\n")
    print(f"\ngpu-check: table written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
