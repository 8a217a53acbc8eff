"""`make gpu-check`: what the toolkit does on one GPU, in one run, as one table.

    python benchmarks/gpu_check.py [--out runs/gpu_check/table.md] [--parts tests,env,vla,pipeline,ppo,vla_smol]
                                   [--budget 450] [--baseline PATH/TO/ManiSkill/ppo.py]

Parts, each in a child process under its own time limit (a part that runs out keeps the rows
it printed so far and says so; the limits are scaled down to fit --budget seconds in all), in
this order, the most valuable first:
  warp_env  our MuJoCo tasks on MuJoCo Warp (env.backend=warp, sims/mujoco/warp_env.py): PushCube
            env steps/s at 1024, 4096 and 16384 worlds from state and at 1024 with 64 px RGB, against
            the C backend (mujoco.batch) on all of the machine's CPUs in the same run
  warp_ppo  state PPO on PushCube with 4096 warp envs on the GPU: wall time to 90% eval success
  warp_grpo flow-VLA GRPO from 64 px pixels on ReachPoint with 1024 warp envs (a fresh tiny VLA,
            no SFT start): env steps/s of the whole training loop and the eval success reached
  tests     every test marked `cuda` (pytest -m cuda), none may be skipped
  env       ManiSkill physx_cuda PickCube-v1 env steps/s at 1024 and 4096 envs: our adapter
            (sims/maniskill) against bare ManiSkill stepped in the same run
  ppo       state PPO on PickCube-v1 with 1024 envs on the GPU: wall time to 90% eval success,
            ours (`embodied train`, train.device=cuda) against ManiSkill's PPO baseline
            (examples/baselines/ppo/ppo.py of the ManiSkill repository, not part of this project:
            --baseline points at a copy; without it the row quotes the baseline's published settings)
  vla       the flow VLA at pi0's size (policies/vla/pretrained/presets.py, random weights, bf16
            autocast): act latency for one observation, RL step and SFT step samples/s, peak memory
  pipeline  synchronous against pipelined rollout with the policy on the GPU
            (benchmarks/bench_pipeline.py, train.device=cuda)
  vla_smol  the flow VLA at SmolVLA's size per training mode (policies/vla/modes.py; the modes of
            benchmarks/bench_vla_memory.py): peak memory at batch 32 (target: within 22 GiB), then
            the largest batch that fits (the largest that policies/memory.py predicts to fit, halved
            on out-of-memory) with RL-step and SFT-step samples/s and measured against predicted
            peak; act latency at 1 and 64 observations
  vla_pi0   the same at pi0's size (target: RL at batch >= 64 and >= 100 samples/s with the VLM
            frozen or LoRA-adapted)
Without a CUDA device it prints which parts it skipped and why, and exits 0. The table (markdown,
with machine, date and commit) is printed and written to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# seconds each, before scaling to --budget; the last part also gets what the others left unused
PARTS = {"warp_env": 150, "warp_ppo": 150, "warp_grpo": 90, "tests": 60, "env": 65, "vla": 55, "pipeline": 30,
         "ppo": 260, "vla_smol": 150, "vla_pi0": 210}
WARP_PARTS = ("warp_env", "warp_ppo", "warp_grpo")  # need mujoco_warp and warp
# --dry-run: the warp parts on warp's CPU device at 1/64 of their sizes (tests this script without a GPU)
DRY = os.environ.get("GPU_CHECK_DRY") == "1"
DEV = "cpu" if DRY else "cuda"


def size(n: int) -> int:
    return max(n // 64, 16) if DRY else n
VLA_PARTS = ("vla_smol", "vla_pi0")  # --dry-run: the tiny preset on the CPU
MS_PARTS = ("env", "ppo")  # need mani_skill / sapien (the tests part reports its own skips)


def row(part: str, what: str, value: str, ref: str = "", note: str = "") -> None:
    """Print one table row for the parent process (rows survive a part's timeout)."""
    print("ROW " + json.dumps([part, what, value, ref, note]), flush=True)


# ---------------------------------------------------------------------------------------- parts
def part_tests(limit: float) -> None:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                   if "mark.cuda" in p.read_text())
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rs", "-p", "no:cacheprovider",
                          "--timeout", str(int(limit)), *files], cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - t
    tail = out.stdout.strip().splitlines()
    print("\n".join(tail[-25:]), flush=True)
    summary = tail[-1] if tail else out.stderr.strip()[-200:]
    ok = out.returncode == 0 and "skipped" not in summary
    row("tests", f"pytest -m cuda ({len(files)} files)", summary.strip("= "), "all pass, none skipped",
        f"{'ok' if ok else 'FAIL'}; {took:.0f} s")


def part_env(limit: float) -> None:
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_maniskill import adapter_steps_per_s, bare_steps_per_s

    for n in (1024, 4096):
        bare = bare_steps_per_s("PickCube-v1", n, 100)
        torch.cuda.empty_cache()
        ours = adapter_steps_per_s("ms:PickCube-v1", n, 100)
        torch.cuda.empty_cache()
        row("env", f"PickCube-v1 physx_cuda x{n}: env steps/s, adapter / bare", f"{ours:,.0f} / {bare:,.0f}",
            "adapter >= 0.95x bare", f"{ours / bare:.2f}x")


def _watch(cmd: list[str], limit: float, parse, cwd: Path) -> tuple[float | None, str]:
    """Run cmd until parse(line) returns (success rate >= 0.9, env steps) or `limit` s pass;
    returns (seconds to 0.9 or None, the best 'rate at steps' seen)."""
    import queue
    import threading

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] and None, daemon=True).start()
    best, best_rate, hit, tail = "none", -1.0, None, []
    while time.perf_counter() - t0 < limit:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None and lines.empty():
                break
            continue
        tail = (tail + [line.rstrip()])[-8:]
        got = parse(line)
        if got is None:
            continue
        rate, steps = got
        if rate > best_rate:
            best, best_rate = f"{rate:.2f} at {steps:,} env steps ({time.perf_counter() - t0:.0f} s)", rate
        if rate >= 0.9:
            hit = time.perf_counter() - t0
            break
    os.killpg(proc.pid, 9) if proc.poll() is None else None
    proc.wait()
    if hit is None:
        print("\n".join(tail), flush=True)
    return hit, best


def _env_rate(env, steps: int) -> float:
    """Env steps/s of `steps` steps of uniform random actions, after 3 warm-up steps (kernel loads,
    graph capture), auto-resets included."""
    import torch

    env.reset(seed=0)
    dev = env.device
    actions = [torch.rand(env.num_envs, env.spec.action_dim, device=dev) * 2 - 1 for _ in range(4)]
    for k in range(3):
        env.step(actions[k])
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    for k in range(steps):
        env.step(actions[k % 4])
    sync()
    return env.num_envs * steps / (time.perf_counter() - t)


def part_warp_env(limit: float) -> None:
    import torch

    from sims.registry import make_env

    t_end = time.perf_counter() + limit
    got: dict[tuple[str, int, str], float] = {}
    cases = [("warp", 4096, "state"), ("cpu", 4096, "state"), ("warp", 1024, "state"), ("warp", 16384, "state"),
             ("warp", 1024, "rgb"), ("cpu", 1024, "state"), ("cpu", 1024, "rgb")]
    for backend, n, mode in cases:
        n = size(n)
        if time.perf_counter() > t_end - 20:
            row("warp_env", f"{backend} {n} envs {mode}", "not run", "", "time limit")
            continue
        t0 = time.perf_counter()
        kw = {"backend": backend, "obs_mode": mode}
        if backend == "warp":
            kw["device"] = DEV
        else:
            kw["num_threads"] = os.cpu_count()
        if mode == "rgb":
            kw.update(cameras=("front",), image_size=64)
        try:
            env = make_env("PushCube", n, **kw)
            built = time.perf_counter() - t0
            steps = 100 if backend == "warp" and mode == "state" and not DRY else (20 if n <= 1024 else 10)
            got[(backend, n, mode)] = r = _env_rate(env, steps)
            env.close()
        except Exception as e:  # one case's failure is a row; the others still run
            import traceback

            traceback.print_exc()
            row("warp_env", f"{backend} {n} envs {mode}", "failed", "", f"{type(e).__name__}: {str(e)[:200]}")
            continue
        where = ("GPU" if not DRY else "warp's CPU device") if backend == "warp" else f"{os.cpu_count()} CPUs"
        unit = " (64 px frames/s the same)" if mode == "rgb" else ""
        row("warp_env", f"PushCube {mode}, {n} envs, {backend} backend on {where}", f"{r:,.0f} env steps/s",
            ">= 200,000 at 4096 (state)" if (backend, n, mode) == ("warp", 4096, "state") else
            (">= 20,000 frames/s" if mode == "rgb" and backend == "warp" else ""),
            f"{steps} steps of random actions after 3 warm-up; built in {built:.0f} s{unit}")
        del env
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    for n, mode in ((size(4096), "state"), (size(1024), "state"), (size(1024), "rgb")):
        if ("warp", n, mode) in got and ("cpu", n, mode) in got:
            row("warp_env", f"warp / C backend, {n} envs {mode}", f"{got[('warp', n, mode)] / got[('cpu', n, mode)]:.1f}x",
                ">= 10x at 4096 (state)" if n == 4096 else "", "the same run")


WARP_PPO = ["env.backend=warp", f"env.num_envs={size(4096)}", "env.reward_mode=dense", "ppo.rollout_steps=16",
            "ppo.epochs=8", "ppo.minibatches=32", f"train.device={DEV}", "train.torch_threads=0",
            "train.total_steps=20000000", "train.eval_every=2", "train.eval_episodes=256", "train.save_every=0",
            "train.progress=false", "train.video_episodes=0"]


def part_warp_ppo(limit: float) -> None:
    import re

    run = ROOT / "runs" / "gpu_check_warp_ppo"
    cmd = [sys.executable, "-m", "embodied.cli", "train", str(ROOT / "configs/ppo/quickstart.yaml"), *WARP_PPO,
           f"train.run_dir={run}", "--overwrite"]
    pat = re.compile(r"step (\d+): eval success ([0-9.]+)")

    def ours(line: str):
        m = pat.search(line)
        return (float(m.group(2)), int(m.group(1))) if m else None

    hit, best = _watch(cmd, limit, ours, ROOT)
    row("warp_ppo", "PPO PushCube from state, 4096 warp envs: s to 90% eval success", f"{hit:.0f} s" if hit else
        f"> {limit:.0f} s", "<= 60 s (ManiSkill's GPU PPO: under a minute)", f"best {best}; incl. start-up and "
        f"kernel loads; {' '.join(WARP_PPO[1:6])}")


# `make demo`'s pipeline (configs/pipeline/demo.yaml: slow demos, SFT of the tiny flow VLA, GRPO with
# Flow-Noise) with 64 px cameras and 1024 warp envs on the GPU
WARP_GRPO = ["collect.image_size=64", "rl.env.image_size=64", "rl.env.backend=warp", f"rl.env.num_envs={size(1024)}",
             f"rl.train.device={DEV}", f"sft.device={DEV}", "rl.train.torch_threads=0", "rl.train.total_steps=3000000",
             "rl.train.eval_every=2", "rl.train.eval_episodes=256", "rl.train.save_every=0", "rl.train.video_episodes=0"]


def part_warp_grpo(limit: float) -> None:
    import re

    run = ROOT / "runs" / "gpu_check_warp_grpo"
    cmd = [sys.executable, "-m", "embodied.cli", "pipeline", "demo", *WARP_GRPO, f"run_dir={run}"]
    pat = re.compile(r"step (\d+): eval success ([0-9.]+)")
    t0 = time.perf_counter()
    seen: list[tuple[float, int, float]] = []

    def ours(line: str):
        m = pat.search(line)
        if m:
            seen.append((float(m.group(2)), int(m.group(1)), time.perf_counter() - t0))
            return float(m.group(2)), int(m.group(1))
        return None

    hit, best = _watch(cmd, limit, ours, ROOT)
    rate = "fewer than two evaluations"
    if len(seen) >= 2:
        (_, s0, w0), (_, s1, w1) = seen[0], seen[-1]
        rate = f"RL {(s1 - s0) / max(w1 - w0, 1e-9):,.0f} env steps/s between its first and last evaluation"
    row("warp_grpo", "flow-VLA GRPO ReachPoint 64 px, 1024 warp envs: s to 0.9 eval success", f"{hit:.0f} s" if hit
        else f"> {limit:.0f} s", "", f"best {best}; {rate}; incl. demos and SFT (`embodied pipeline demo`)")


# configs/ppo_ms_pickcube.yaml at ManiSkill's published PickCube settings for its ppo.py (1024 envs,
# pd_joint_delta_pos, normalized dense reward, gamma 0.8, lambda 0.9, 8 epochs of 32 minibatches,
# lr 3e-4 constant, clip 0.2, MSE value loss, grad norm 0.5, target KL 0.1, 3x256 tanh MLPs)
OURS_PPO = ["env.task=ms:PickCube-v1@pd_joint_delta_pos", "env.num_envs=1024", "env.reward_mode=staged",
            "ppo.rollout_steps=50", "ppo.epochs=8", "ppo.minibatches=32", "ppo.lr_schedule=constant",
            "ppo.clip_high=0.2", "ppo.dual_clip=null", "ppo.value_clip=null", "ppo.value_loss=mse",
            "ppo.max_grad_norm=0.5", "ppo.target_kl=0.1", "policy.hidden_sizes=[256,256,256]",
            "train.device=cuda", "train.torch_threads=0", "train.total_steps=10000000", "train.eval_every=5",
            "train.eval_episodes=64", "train.save_every=0", "train.progress=false"]


def part_ppo(limit: float, baseline: str | None) -> None:
    import re

    half = limit / 2
    run = ROOT / "runs" / "gpu_check_ppo"
    config = next(iter(sorted((ROOT / "configs").rglob("ppo_ms_pickcube.yaml"))))
    ours_cmd = [sys.executable, "-m", "embodied.cli", "train", str(config), *OURS_PPO, f"train.run_dir={run}"]
    pat = re.compile(r"step (\d+): eval success ([0-9.]+)")

    def ours(line: str):
        m = pat.search(line)
        return (float(m.group(2)), int(m.group(1))) if m else None

    hit, best = _watch(ours_cmd, half, ours, ROOT)
    row("ppo", "ours: s to 90% eval success (1024 envs)", f"{hit:.0f} s" if hit else f"> {half:.0f} s",
        "", f"best {best}; incl. start-up")
    if baseline is None or not Path(baseline).is_file():
        row("ppo", "ManiSkill ppo.py: s to 90%", "not run", "",
            "no copy given (--baseline); its published settings: --num_envs=1024 --update_epochs=8 "
            "--num_minibatches=32 --total_timesteps=10M, pd_joint_delta_pos")
        return
    steps = {"n": 0}
    g = re.compile(r"global_step=(\d+)")
    e = re.compile(r"eval_success_once_mean=([0-9.]+)")

    def theirs(line: str):
        m = g.search(line)
        if m:
            steps["n"] = int(m.group(1))
        m = e.search(line)
        return (float(m.group(1)), steps["n"]) if m else None

    cmd = [sys.executable, str(Path(baseline).resolve()), "--env_id=PickCube-v1", "--num_envs=1024",
           "--update_epochs=8", "--num_minibatches=32", "--total_timesteps=10000000", "--eval_freq=5",
           "--num_eval_envs=64", "--no-capture_video", "--no-save_model"]
    work = ROOT / "runs" / "gpu_check_baseline"
    work.mkdir(parents=True, exist_ok=True)
    hit, best = _watch(cmd, half, theirs, work)
    row("ppo", "ManiSkill ppo.py: s to 90% eval success_once (1024 envs)", f"{hit:.0f} s" if hit else f"> {half:.0f} s",
        "", f"best {best}; its published PickCube settings; incl. start-up")


def part_vla(limit: float) -> None:
    import statistics

    import torch

    from embodied.rl.algorithms.ppo import ppo_policy_loss
    from policies.vla.flow import FlowVLA
    from policies.vla.pretrained.presets import PRESETS

    dev = torch.device("cuda")
    cfg = dataclasses.replace(PRESETS["pi0"](), noise_method="flow_noise")  # pi_RL's exploration
    t = time.perf_counter()
    with dev:
        policy = FlowVLA(cfg)
    n_par = sum(p.numel() for p in policy.parameters())
    row("vla", "pi0 preset (random weights): parameters, build s", f"{n_par / 1e9:.2f} B", "",
        f"built on the GPU in {time.perf_counter() - t:.0f} s, fp32 weights, bf16 autocast")
    size = cfg.vision["image_size"]

    def obs(b: int) -> dict:
        return {"state": torch.randn(b, cfg.state_dim, device=dev),
                "instruction": ["pick up the red cube and put it in the box"] * b,
                **{f"rgb_{c}": torch.randint(0, 256, (b, size, size, 3), dtype=torch.uint8, device=dev)
                   for c in cfg.cameras}}

    def timed(fn, reps: int) -> float:
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    auto = torch.autocast("cuda", dtype=torch.bfloat16)
    policy.eval()
    o1 = obs(1)
    with torch.no_grad(), auto:
        lat = timed(lambda: policy.act(o1, deterministic=True), 5)
    row("vla", "act latency, one observation", f"{lat * 1e3:.0f} ms", "",
        f"{cfg.num_steps} Euler steps, chunk {cfg.chunk_size}, bf16 autocast")
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-5, fused=True)
    for b in (16, 8, 4):
        try:
            ob = obs(b)
            with torch.no_grad(), auto:
                out = policy.act(ob)

            def rl_step():
                with auto:
                    ev = policy.evaluate(ob, out.replay)
                adv = torch.randn(b, device=dev)
                # float32 log-prob arithmetic (the ratio) outside autocast
                loss, _ = ppo_policy_loss(ev.log_prob.float(), out.log_prob.float(), adv)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            def sft_step():
                with auto:
                    loss = policy.sft_loss(ob, out.actions[:, :, : cfg.action_dim])
                opt.zero_grad(set_to_none=True)
                loss.float().backward()
                opt.step()

            policy.train()
            torch.cuda.reset_peak_memory_stats()
            rl = timed(rl_step, 3)
            peak_rl = torch.cuda.max_memory_allocated() / 2 ** 30
            torch.cuda.reset_peak_memory_stats()
            sft = timed(sft_step, 3)
            peak_sft = torch.cuda.max_memory_allocated() / 2 ** 30
            row("vla", f"RL step (PPO loss, full fine-tune, AdamW), batch {b}", f"{b / rl:.1f} samples/s",
                "", f"{rl:.2f} s/step; peak {peak_rl:.1f} GiB")
            row("vla", f"SFT step (flow loss, full fine-tune, AdamW), batch {b}", f"{b / sft:.1f} samples/s",
                "", f"{sft:.2f} s/step; peak {peak_sft:.1f} GiB")
            return
        except torch.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            print(f"batch {b}: out of memory", flush=True)
    row("vla", "RL / SFT step", "out of memory at batch 4", "", "")


# (mode, batches to try first) per preset, the most valuable first; then each mode's largest batch
VLA_MODES = {"smolvla": ["frozen_bf16_ckpt", "lora16_bf16_ckpt", "frozen_bf16_ckpt_8bit_ref", "full_ckpt_8bit", "full"],
             "pi0": ["frozen_bf16_ckpt", "lora16_bf16_ckpt", "frozen_bf16_ckpt_8bit_ref", "full_ckpt_8bit", "full"]}
VLA_FIRST = {"smolvla": 32, "pi0": 64}  # the targets: SmolVLA batch 32 within 22 GiB, pi0 batch 64


def _vla_modes(preset: str, limit: float) -> None:
    """Per training mode: RL and SFT steps at the target batch and at the largest that fits; act
    latency. --dry-run: the tiny preset on the CPU at batch 8 (tests this code without a GPU)."""
    import contextlib
    import importlib.util
    import statistics

    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_vla_memory import MODES, build, observations, plan_of, preset_config, random_replay, rl_step, sft_step

    from policies.memory import GiB, predict

    part = "vla_smol" if preset == "smolvla" else "vla_pi0"
    t_end = time.perf_counter() + limit
    dev = torch.device(DEV)
    total = 8 * GiB if DRY else torch.cuda.get_device_properties(dev).total_memory
    cfg = preset_config("tiny" if DRY else preset)
    auto = contextlib.nullcontext if DRY else (lambda: torch.autocast("cuda", dtype=torch.bfloat16))
    sync = (lambda: None) if DRY else torch.cuda.synchronize
    first = 8 if DRY else VLA_FIRST[preset]

    def timed(fn, reps: int = 2) -> float:
        fn()
        sync()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    def steps(mode: str, b: int) -> None:
        policy, opt, ref = build(cfg, mode, dev)
        try:
            for step in ("rl", "sft"):
                obs = observations(cfg, b, dev)
                pred = predict("flow_vla", cfg, plan_of(mode, step, b, autocast=not DRY))["total"] / GiB
                if not DRY:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                if step == "rl":
                    replay = random_replay(cfg, b, dev)
                    s = timed(lambda: rl_step(policy, opt, obs, replay, ref, auto()))
                else:
                    actions = torch.rand(b, cfg.chunk_size, cfg.action_dim, device=dev) * 2 - 1
                    s = timed(lambda: sft_step(policy, opt, obs, actions, auto()))
                peak = float("nan") if DRY else torch.cuda.max_memory_allocated() / GiB
                target = ""
                if step == "rl" and b == first:
                    target = "peak <= 22 GiB" if preset == "smolvla" else ">= 100 samples/s (VLM frozen or LoRA)"
                row(part, f"{mode}: {step.upper()} step, batch {b}", f"{b / s:.1f} samples/s", target,
                    f"{s:.2f} s/step; peak {peak:.2f} GiB, predicted {pred:.2f} GiB")
        finally:
            del policy, opt, ref
            torch.cuda.empty_cache() if not DRY else None

    for mode in VLA_MODES[preset][:2] if DRY else VLA_MODES[preset]:
        if time.perf_counter() > t_end - 30:
            row(part, mode, "not run", "", "time limit")
            continue
        if MODES[mode][4] == "adam_8bit" and importlib.util.find_spec("bitsandbytes") is None:
            row(part, mode, "not run", "", "bitsandbytes is not installed (pip install -c constraints.txt bitsandbytes)")
            continue
        sizes = (8,) if DRY else (1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1)
        fits = [b for b in sizes if predict("flow_vla", cfg, plan_of(mode, "rl", b, autocast=not DRY))["total"] < 0.92 * total]
        if not fits:
            row(part, f"{mode}: RL step", "does not fit", "", "predicted above 92% of the device at batch 1")
            continue
        tried: set[int] = set()
        for b in dict.fromkeys(([first] if first <= fits[0] else []) + fits[:1]):
            while b >= 1 and b not in tried and time.perf_counter() < t_end - 20:
                tried.add(b)
                try:
                    steps(mode, b)
                    break
                except torch.OutOfMemoryError:
                    torch.cuda.empty_cache()
                    print(f"{mode} batch {b}: out of memory (predicted to fit)", flush=True)
                    row(part, f"{mode}: batch {b}", "out of memory", "", "predicted to fit; halved")
                    b //= 2
    policy, _, _ = build(cfg, "frozen_bf16_ckpt", dev)
    policy.eval()
    for b in (1, 64):
        if time.perf_counter() > t_end - 10:
            row(part, f"act latency, {b} observation(s)", "not run", "", "time limit")
            continue
        obs = observations(cfg, b, dev)
        with torch.no_grad(), auto():
            lat = timed(lambda: policy.act(obs, deterministic=True), 3)
        row(part, f"act latency, {b} observation(s)", f"{lat * 1e3:.0f} ms", "",
            f"{cfg.num_steps} Euler steps, chunk {cfg.chunk_size}, bf16 frozen prefix" + ("" if DRY else ", bf16 autocast"))


def part_vla_smol(limit: float) -> None:
    _vla_modes("smolvla", limit)


def part_vla_pi0(limit: float) -> None:
    _vla_modes("pi0", limit)


def part_pipeline(limit: float) -> None:
    out = subprocess.run([sys.executable, "benchmarks/bench_pipeline.py", "--envs", "256", "--steps", "32",
                          "--repeats", "2", "--device", "cuda"], cwd=ROOT, capture_output=True, text=True,
                         timeout=limit)
    lines = out.stdout.strip().splitlines()
    print("\n".join(lines[-15:]) + out.stderr[-1500:], flush=True)
    for line in lines:  # "mode  env steps/s  vs sync  cpu/wall  CPU us/step  infer s  env wait s  runs"
        cells = line.split()
        if cells and cells[0] in ("train.py", "sync", "pipelined"):
            row("pipeline", f"{cells[0]}: env steps/s, policy on cuda (256 PushCube envs)", cells[1], "",
                f"{cells[2]} of sync; runs {' '.join(cells[-2:])}")
    if out.returncode != 0:
        row("pipeline", "bench_pipeline.py", f"exit {out.returncode}", "", (out.stderr.strip().splitlines() or [""])[-1])


# --------------------------------------------------------------------------------------- driver
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
        fn = globals()[f"part_{args.part}"]
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
