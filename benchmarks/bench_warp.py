"""The MuJoCo Warp backend against the C backend, on this machine's CPU (warp's CPU device).

  python benchmarks/bench_warp.py speed [--envs 64 256] [--steps 30]
      env steps/s of PushCube with random actions (auto-resets included), state and 64 px RGB
      (front camera), both backends, in one run; the C backend on all CPUs
  python benchmarks/bench_warp.py equality [--envs 64] [--seed 1000]
      per task, from the same seeds: initial-state difference, 64 px frame difference (front and
      wrist), the scripted expert's success rate on each backend, and how far the TCP paths part
      along the expert's first episode (the figures tests/sims/test_sims_warp.py's tolerances
      come from)

Prints a markdown table with machine, date and commit. On a GPU the same comparison at thousands
of worlds is `make gpu-check`'s warp_env part (benchmarks/gpu_check.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from sims.registry import expert_for, list_tasks, make_env  # noqa: E402


def header(cmd: str) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
            f"{os.getloadavg()[0]:.1f}; commit {commit}; {when}; `python benchmarks/bench_warp.py {cmd}`")


def rate(env, steps: int) -> float:
    """Env steps/s of `steps` steps of uniform random actions after 3 warm-up steps."""
    env.reset(seed=0)
    g = torch.Generator().manual_seed(0)
    acts = [torch.rand(env.num_envs, 4, generator=g) * 2 - 1 for _ in range(8)]
    for k in range(3):
        env.step(acts[k])
    t = time.perf_counter()
    for k in range(steps):
        env.step(acts[k % 8])
    return env.num_envs * steps / (time.perf_counter() - t)


def cmd_speed(args) -> None:
    print(header("speed " + " ".join(sys.argv[2:])) + "\n")
    print("| envs | obs | C backend (env steps/s) | warp backend on CPU (env steps/s) | warp / C |")
    print("| --- | --- | --- | --- | --- |")
    for n in args.envs:
        for mode in ("state", "rgb"):
            kw = {"obs_mode": mode, **({"cameras": ("front",), "image_size": 64} if mode == "rgb" else {})}
            got = {}
            for backend in ("cpu", "warp"):
                env = make_env("PushCube", n, backend=backend, **kw)
                got[backend] = rate(env, args.steps)
                env.close()
            print(f"| {n} | {mode} | {got['cpu']:,.0f} | {got['warp']:,.0f} | {got['warp'] / got['cpu']:.2f}x |",
                  flush=True)


def first_episode(envs: dict, expert, n: int) -> tuple[dict, np.ndarray]:
    """Run the expert on each backend to the end of every env's first episode: (success rate per
    backend, TCP distance between the backends [steps x envs alive on both], m)."""
    obs = {b: e.reset(seed=ARGS.seed)[0] for b, e in envs.items()}
    alive = {b: np.ones(n, bool) for b in envs}
    success = {b: np.zeros(n, bool) for b in envs}
    dev = []
    for _ in range(envs["cpu"].spec.max_episode_steps):
        res = {b: e.step(torch.from_numpy(expert(obs[b]["privileged"].numpy()))) for b, e in envs.items()}
        both = alive["cpu"] & alive["warp"]
        tcp = {b: (r.final_obs or r.obs)["privileged"][:, :3] for b, r in res.items()}
        dev.append((tcp["warp"] - tcp["cpu"]).norm(dim=1).numpy()[both])
        for b, r in res.items():
            success[b] |= r.info["success"].numpy() & alive[b]
            alive[b] &= ~(r.terminated | r.truncated).numpy()
            obs[b] = r.obs
    return {b: float(s.mean()) for b, s in success.items()}, np.concatenate(dev)


def cmd_equality(args) -> None:
    n = args.envs[0]
    print(header("equality " + " ".join(sys.argv[2:])) + f"\n\n{n} seeds per task from {args.seed}; frames 64 px; "
          "pixel differences in 0-255 units, '> 32': share of pixels with a channel off by more than 32\n")
    print("| task | initial state, max abs diff | front: mean abs / > 32 | wrist: mean abs / > 32 | expert success C / warp "
          "| TCP apart along the expert: median / 95% / max (m) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for task in list_tasks():
        envs = {b: make_env(task, n, backend=b, obs_mode="rgb", cameras=("front", "wrist"), image_size=64)
                for b in ("cpu", "warp")}
        obs = {b: e.reset(seed=args.seed)[0] for b, e in envs.items()}
        init = float((obs["warp"]["privileged"] - obs["cpu"]["privileged"]).abs().max())
        pix = []
        for cam in ("front", "wrist"):
            d = (obs["warp"][f"rgb_{cam}"].float() - obs["cpu"][f"rgb_{cam}"].float()).abs()
            pix.append(f"{float(d.mean()):.2f} / {float((d.max(-1).values > 32).float().mean()):.2%}")
        for e in envs.values():
            e.close()
        envs = {b: make_env(task, n, backend=b) for b in ("cpu", "warp")}
        success, dev = first_episode(envs, expert_for(task), n)
        for e in envs.values():
            e.close()
        print(f"| {task} | {init:.1e} | {pix[0]} | {pix[1]} | {success['cpu']:.3f} / {success['warp']:.3f} | "
              f"{np.median(dev):.1e} / {np.percentile(dev, 95):.1e} / {dev.max():.1e} |", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("speed", "equality"))
    ap.add_argument("--envs", type=int, nargs="+", default=None)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1000)
    ARGS = ap.parse_args()
    ARGS.envs = ARGS.envs or ([64, 256] if ARGS.what == "speed" else [64])
    (cmd_speed if ARGS.what == "speed" else cmd_equality)(ARGS)
