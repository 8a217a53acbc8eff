"""VLA benchmarks: act latency, SFT throughput and peak memory of the tiny presets, and an
optional SFT learning run (PushCube by default) with its success rate.

    python benchmarks/bench_vla.py                       # latency + throughput
    python benchmarks/bench_vla.py --learn PushCube --minutes 15 --episodes 300

Latency: median wall time of `act` (deterministic) at batch 1 and 32; flow for N = 1, 4,
10 Euler steps, AR for its K * A decoded tokens. SFT: samples/s of sft_loss + backward +
AdamW at batch 32, and the process's peak resident memory (CPU) or peak CUDA memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "imitation")]  # test_vla_demos

import torch  # noqa: E402

from policies.vla.autoregressive import ARVLA  # noqa: E402
from policies.vla.config import ARVLAConfig, FlowVLAConfig  # noqa: E402
from policies.vla.flow import FlowVLA  # noqa: E402


def _obs(B: int, device: torch.device) -> dict:
    return {"state": torch.randn(B, 9, device=device),
            "rgb_front": torch.randint(0, 256, (B, 64, 64, 3), dtype=torch.uint8, device=device),
            "instruction": ["push the red cube onto the green square"] * B}


def _time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def latency(device: torch.device, repeats: int) -> dict[str, float]:
    out = {}
    flow = FlowVLA(FlowVLAConfig()).to(device).eval()
    ar = ARVLA(ARVLAConfig()).to(device).eval()
    for B in (1, 32):
        obs = _obs(B, device)
        for N in (1, 4, 10):
            out[f"flow_act_ms_B{B}_N{N}"] = 1e3 * _time(lambda: flow.act(obs, True, num_steps=N), repeats)
        out[f"ar_act_ms_B{B}_tokens16"] = 1e3 * _time(lambda: ar.act(obs, True), repeats)
    return out


def sft_throughput(device: torch.device, steps: int, batch: int = 32) -> dict[str, float]:
    out = {}
    for name, policy in (("flow", FlowVLA(FlowVLAConfig())), ("ar", ARVLA(ARVLAConfig()))):
        policy.to(device).train()
        opt = torch.optim.AdamW(policy.parameters(), lr=1e-4)
        obs, actions = _obs(batch, device), torch.rand(batch, 4, 4, device=device) * 2 - 1
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()

        def step() -> None:
            loss = policy.sft_loss(obs, actions)
            opt.zero_grad()
            loss.backward()
            opt.step()

        dt = _time(step, steps)
        out[f"{name}_sft_samples_per_s"] = batch / dt
        out[f"{name}_params_M"] = sum(p.numel() for p in policy.parameters()) / 1e6
        if device.type == "cuda":
            out[f"{name}_sft_peak_cuda_MiB"] = torch.cuda.max_memory_allocated() / 2**20
    out["process_peak_rss_MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def learn(task: str, policy_name: str, episodes: int, minutes: float, eval_episodes: int,
          cameras: tuple[str, ...] = ("front",), image_size: int = 64, execute_steps: int = 0,
          lr: float = 1e-3, chunk_size: int = 4, noise_std: float = 0.3, label_sigma: float = 0.0) -> dict:
    """SFT on expert demos of `task` for a wall-clock budget (demo collection, training and
    the final evaluation all count); success in the simulator over eval_episodes seeds."""
    from embodied.imitation.sft import SFTConfig, build_policy, train_sft
    from sims.registry import make_env
    from test_vla_demos import build_expert_demos

    t0 = time.perf_counter()
    demos = build_expert_demos(task, episodes, chunk_size=chunk_size, num_envs=16, noise_std=noise_std,
                               image_size=image_size, cameras=cameras)
    t_demo = time.perf_counter() - t0
    cfg = SFTConfig(policy=policy_name, batch_size=32, torch_threads=torch.get_num_threads(), chunk_size=chunk_size,
                    cameras=list(cameras), image_size=image_size, execute_steps=execute_steps, num_steps=5,
                    steps=10**7, max_minutes=minutes - t_demo / 60 - 1.5,  # 1.5 min left for the evaluation
                    lr=lr, warmup_steps=100, eval_every=0, label_sigma=label_sigma, save_every=0,
                    eval_episodes=eval_episodes, task=task,
                    run_dir=f"/tmp/bench_vla_{task}_{policy_name}")
    env = make_env(task, min(eval_episodes, 25), obs_mode="rgb", image_size=image_size,
                   cameras=tuple(cameras), num_threads=1)
    p = build_policy(cfg, demos.stats)
    summary = train_sft(p, demos, cfg, env)
    env.close()
    steps = summary["steps"]
    return {"task": task, "policy": policy_name, "episodes": episodes, "demo_items": len(demos),
            "cameras": list(cameras), "image_size": image_size, "execute_steps": execute_steps,
            "chunk_size": chunk_size, "label_sigma": label_sigma,
            "sft_steps": steps, "demo_minutes": t_demo / 60, "eval_episodes": eval_episodes,
            "success_rate": summary["eval"][-1][1], "minutes": (time.perf_counter() - t0) / 60,
            "final_loss": statistics.mean(summary["loss"][-50:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on 2 shared cores)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--learn", default="", help="task for an SFT learning run, e.g. PushCube")
    ap.add_argument("--policy", default="flow_vla", choices=["flow_vla", "ar_vla"])
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--minutes", type=float, default=15.0)
    ap.add_argument("--eval-episodes", type=int, default=50)
    ap.add_argument("--cameras", default="front", help="comma-separated, e.g. front,wrist")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--execute-steps", type=int, default=0, help="actions of each chunk executed (0: all)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--chunk-size", type=int, default=4, help="K: actions per predicted chunk")
    ap.add_argument("--label-sigma", type=float, default=0.0, help="ar_vla: HL-Gauss target width in bins")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    res: dict = {"machine": f"{platform.node()} {os.cpu_count()} cpus, torch {torch.__version__}, "
                            f"{device}, {args.threads} threads", "date": time.strftime("%Y-%m-%d")}
    if args.learn:
        res["load_avg_1m_start"] = os.getloadavg()[0]
        res["learn"] = learn(args.learn, args.policy, args.episodes, args.minutes, args.eval_episodes,
                             tuple(args.cameras.split(",")), args.image_size, args.execute_steps, args.lr,
                             args.chunk_size, label_sigma=args.label_sigma)
        res["load_avg_1m_end"] = os.getloadavg()[0]
    else:
        res.update(latency(device, args.repeats))
        res.update(sft_throughput(device, args.repeats))
    print(json.dumps(res, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
