"""`make gpu-check`'s simulator parts (benchmarks/gpu_check.py runs each in a child process under
its own time limit): the CUDA tests, ManiSkill's GPU env and PPO against its baseline, MuJoCo Warp's
env, PPO and GRPO, and the pipelined rollout. What each measures: gpu_check.py's docstring."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gpu_check_common import DEV, DRY, ROOT, row, size, watch


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

    hit, best = watch(cmd, limit, ours, ROOT)
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

    hit, best = watch(cmd, limit, ours, ROOT)
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

    hit, best = watch(ours_cmd, half, ours, ROOT)
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
    hit, best = watch(cmd, half, theirs, work)
    row("ppo", "ManiSkill ppo.py: s to 90% eval success_once (1024 envs)", f"{hit:.0f} s" if hit else f"> {half:.0f} s",
        "", f"best {best}; its published PickCube settings; incl. start-up")


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
