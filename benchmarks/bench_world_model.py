"""World model against the simulator (issue 22): ranking agreement and transfer.

rank: every checkpoint given (or every checkpoint of the run directories given) plays the
same initial states in the simulator and in the world model: the simulator's resets for
evaluation seeds 1_000_000 + i, copied into the model with WorldModelVecEnv.reset_to. The
deterministic policy's success rates are compared: Spearman, Pearson and MMRV
(embodied/eval/stats.py), with 95% bootstrap intervals that resample the seeds (the same
resample for every checkpoint, in both environments).

  python benchmarks/bench_world_model.py rank --wm runs/wm --task PushCube --seeds 128 \\
      --checkpoints runs/ppo_a runs/ppo_b --every 2 --out rank.json
  python benchmarks/bench_world_model.py by-run rank.json   # per run, intervals over checkpoints

rank --rollout members (and transfer --rollout members) steps the model with every member on
its own latent, each start served by one member (sims/world_model/rollout.py).

rank --success-aggregate min scores a model with member heads (member_heads: true) by the
minimum of their success probabilities instead of the mean.

rank --probe T --probe-horizon H2 also plays every start once more in a model whose success
threshold is T and whose horizon is H2, and records each episode's highest success probability
within the task's horizon and within H2. Up to the first step above a threshold t <= T the
episode is the same as in a model with threshold t, so `thresholds rank.json` gives the model's
success at every t <= T, within either horizon, and the agreement each gives.

  python benchmarks/bench_world_model.py thresholds rank.json --ts 0.1,0.2,0.3,0.5,0.7,0.9

transfer: a weak checkpoint trains with PPO (its config's recipe) inside the world model
only; every --eval-every iterations it is scored in the simulator and in the model from the
same initial states.

  python benchmarks/bench_world_model.py transfer --wm runs/wm --start runs/ppo_a/checkpoints/iter_000004 \\
      --steps 300000 --out transfer.json

throughput: env steps/s of the world model and of the simulator it models, at the same batch
and (for a model with cameras) the same cameras and image size, under uniform random actions,
one torch thread and one MuJoCo thread; wall-clock and process CPU time.

  python benchmarks/bench_world_model.py throughput --wm runs/wm_rgb --num-envs 64 --out tp.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from wm_episodes import checkpoints_of, load_policy, probe_in_wm, sim_starts, success_in_sim, success_in_wm


def agreement(sim: np.ndarray, wm: np.ndarray, reps: int = 2000, seed: int = 0) -> dict:
    """sim, wm: bool [C, N] (checkpoint x seed). Point values and 95% bootstrap intervals over seeds."""
    from embodied.eval.stats import mmrv, pearson, spearman

    def stats(s, w):
        a, b = s.mean(1), w.mean(1)
        return spearman(a, b), pearson(a, b), mmrv(a, b)

    point = stats(sim, wm)
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(reps):
        idx = rng.integers(sim.shape[1], size=sim.shape[1])
        boot.append(stats(sim[:, idx], wm[:, idx]))
    boot = np.array(boot, dtype=float)
    out = {}
    for k, name in enumerate(("spearman", "pearson", "mmrv")):
        col = boot[:, k][np.isfinite(boot[:, k])]
        lo, hi = (np.percentile(col, [2.5, 97.5]).tolist() if len(col) else [float("nan")] * 2)
        out[name] = {"value": point[k], "ci95": [lo, hi]}
    return out


def by_run(rows: list[dict], reps: int = 2000, seed: int = 0) -> dict:
    """Agreement over all rows and over each run's rows, with 95% intervals from resampling
    the checkpoints (the spread over which policies were picked; agreement() resamples seeds)."""
    from embodied.eval.stats import mmrv, pearson, spearman

    runs = sorted({r["checkpoint"].split("/")[0] for r in rows})
    out = {}
    for name in ["all", *runs]:
        sel = [r for r in rows if name == "all" or r["checkpoint"].startswith(name + "/")]
        a, b = np.array([r["sim"] for r in sel]), np.array([r["wm"] for r in sel])
        rng = np.random.default_rng(seed)
        boot = []
        for _ in range(reps):
            i = rng.integers(len(a), size=len(a))
            boot.append(spearman(a[i], b[i]) if len(set(a[i])) > 1 and len(set(b[i])) > 1 else np.nan)
        boot = np.array(boot)
        boot = boot[np.isfinite(boot)]
        out[name] = {"checkpoints": len(sel), "spearman": spearman(a, b), "pearson": pearson(a, b),
                     "mmrv": mmrv(a, b), "spearman_ci95_checkpoints":
                     np.percentile(boot, [2.5, 97.5]).tolist() if len(boot) else [float("nan")] * 2}
    return out


def cmd_rank(args: argparse.Namespace) -> dict:
    from embodied.run.env import eval_seeds

    seeds = eval_seeds(args.seeds)
    starts, instr = sim_starts(args.task, seeds)
    rows, sim, wm = [], [], []
    for ckpt in checkpoints_of(args.checkpoints, args.every):
        policy = load_policy(ckpt)
        t0 = time.time()
        s = success_in_sim(policy, args.task, seeds, deterministic=not args.sample)
        t1 = time.time()
        w, u = success_in_wm(policy, args.wm, starts, instr, reward_mode=args.reward_mode,
                             deterministic=not args.sample,
                             obs_kw={"success_aggregate": args.success_aggregate, "rollout": args.rollout,
                                     "model_noise": args.model_noise})
        t2 = time.time()
        sim.append(s)
        wm.append(w)
        rows.append({"checkpoint": f"{ckpt.parent.parent.name}/{ckpt.name}", "sim": float(s.mean()),
                     "wm": float(w.mean()), "wm_uncertain": float(u.mean()),
                     "sim_seconds": round(t1 - t0, 1), "wm_seconds": round(t2 - t1, 1)})
        if args.probe:
            ph, pl = probe_in_wm(policy, args.wm, starts, instr, args.probe, args.probe_horizon)
            rows[-1].update(sim_each=s.astype(int).tolist(), p_task_horizon=np.round(ph, 4).tolist(),
                            p_probe_horizon=np.round(pl, 4).tolist(),
                            probe_matches=bool(((ph > 0.5) == w).all()))
        print(json.dumps(rows[-1]), flush=True)
    return {"task": args.task, "seeds": args.seeds, "reward_mode": args.reward_mode, "sample": args.sample,
            "success_aggregate": args.success_aggregate, "rollout": args.rollout,
            "model_noise": args.model_noise, "probe": args.probe,
            "probe_horizon": args.probe_horizon, "rows": rows,
            "agreement": agreement(np.stack(sim), np.stack(wm)), "by_run": by_run(rows)}


def thresholds(rank: dict, ts: list[float]) -> dict:
    """From a rank JSON made with --probe: per threshold and horizon, the model's success of every
    checkpoint, its mean minus the simulator's, and the agreement by run (intervals over checkpoints)."""
    rows = rank["rows"]
    if "p_task_horizon" not in rows[0]:
        raise SystemExit("thresholds: the rank JSON has no probe columns; make it with rank --probe T")
    out = {}
    for key, name in (("p_task_horizon", "task_horizon"), ("p_probe_horizon", f"horizon_{rank['probe_horizon']}")):
        for t in ts:
            if t > rank["probe"]:
                raise SystemExit(f"--ts: {t} is above the probe threshold; allowed: t <= {rank['probe']}")
            rs = [{**r, "wm": float((np.array(r[key]) > t).mean())} for r in rows]
            out[f"{name}@{t}"] = {"wm": {r["checkpoint"]: r["wm"] for r in rs},
                                  "mean_wm_minus_sim": float(np.mean([r["wm"] - r["sim"] for r in rs])),
                                  "by_run": by_run(rs)}
    return out


def cmd_transfer(args: argparse.Namespace) -> dict:
    from embodied.rl.train import build_algorithm
    from embodied.run.load import config_from_checkpoint
    from embodied.run.env import eval_seeds
    from sims.world_model.env import WorldModelVecEnv

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    ckpt = Path(args.start)
    task = config_from_checkpoint(ckpt).env.task
    cfg = config_from_checkpoint(ckpt, [f"env.task=wm:{args.wm}", f"env.num_envs={args.num_envs}",
                                        f"train.seed={args.seed}"])
    policy = load_policy(ckpt)
    policy.train()
    env = WorldModelVecEnv(args.wm, args.num_envs, seed=args.seed, reward_mode=args.reward_mode,
                           rollout=args.rollout, model_noise=args.model_noise)
    collector, learner = build_algorithm(cfg, env, policy)
    collector.reset(seed=args.seed)
    seeds = eval_seeds(args.seeds)
    starts, instr = sim_starts(task, seeds)
    curve, steps, it, t_start = [], 0, 0, time.time()

    def score():
        policy.eval()
        s = success_in_sim(policy, task, seeds)
        w, u = success_in_wm(policy, args.wm, starts, instr, reward_mode=args.reward_mode,
                             obs_kw={"rollout": args.rollout, "model_noise": args.model_noise})
        policy.train()
        curve.append({"env_steps": steps, "sim": float(s.mean()), "wm": float(w.mean()),
                      "wm_uncertain": float(u.mean()), "wall_seconds": round(time.time() - t_start, 1)})
        print(json.dumps(curve[-1]), flush=True)

    score()
    while steps < args.steps:
        traj = collector.collect()
        stats = learner.update(traj)
        policy.update_normalizer(traj.obs)
        steps += int(traj.valid.sum())
        it += 1
        if it % args.eval_every == 0 or steps >= args.steps:
            score()
            curve[-1]["approx_kl"] = float(stats.get("approx_kl", float("nan")))
    env.close()
    if args.save:
        policy.save_pretrained(args.save)
    return {"start": f"{ckpt.parent.parent.name}/{ckpt.name}", "reward_mode": args.reward_mode,
            "rollout": args.rollout, "model_noise": args.model_noise,
            "wm_steps": steps, "seeds": args.seeds,
            "curve": curve, "lift_sim": curve[-1]["sim"] - curve[0]["sim"],
            "best_sim": max(c["sim"] for c in curve)}


def cmd_throughput(args: argparse.Namespace) -> dict:
    from sims.registry import make_env
    from sims.world_model.checkpoint import load_world_model

    cfg = load_world_model(args.wm)[0].cfg
    kw = dict(obs_mode="rgb", cameras=tuple(cfg.cameras), image_size=tuple(cfg.image_size)) if cfg.cameras else {}
    rows = {}
    for name, task, extra in (("world_model", f"wm:{args.wm}", {}), ("simulator", cfg.task, {"num_threads": 1})):
        env = make_env(task, args.num_envs, **kw, **extra)
        env.reset(seed=0)
        g = torch.Generator().manual_seed(0)
        acts = [torch.rand(args.num_envs, env.spec.action_dim, generator=g) * 2 - 1 for _ in range(args.steps + 1)]
        env.step(acts[0])  # warm-up
        wall, cpu = time.perf_counter(), time.process_time()
        for a in acts[1:]:
            env.step(a)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        env.close()
        n = args.steps * args.num_envs
        rows[name] = {"env_steps": n, "wall_s": wall, "cpu_s": cpu, "steps_per_s_wall": n / wall,
                      "steps_per_s_cpu": n / cpu}
    return {"num_envs": args.num_envs, "obs": kw or {"obs_mode": "state"}, **rows,
            "cpu_speedup": rows["world_model"]["steps_per_s_cpu"] / rows["simulator"]["steps_per_s_cpu"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rank")
    r.add_argument("--wm", required=True)
    r.add_argument("--task", default="PushCube")
    r.add_argument("--checkpoints", nargs="+", required=True)
    r.add_argument("--every", type=int, default=1, help="with run directories: every n-th checkpoint")
    r.add_argument("--seeds", type=int, default=128)
    r.add_argument("--reward-mode", default="dense", choices=["dense", "sparse", "task"],
                   help="task: success is the task's check on the decoded state, not the success head")
    r.add_argument("--sample", action="store_true", help="the policies sample their actions in both environments")
    r.add_argument("--rollout", default="mean", choices=["mean", "members"],
                   help="the model env's rollout (sims/world_model/rollout.py)")
    r.add_argument("--model-noise", type=float, default=0.0,
                   help="the model env's model_noise: Gaussian noise per step, x its one-step error std")
    r.add_argument("--success-aggregate", default="mean", choices=["mean", "min"],
                   help="a model with member heads: the mean or the minimum of their success probabilities")
    r.add_argument("--probe", type=float, default=None,
                   help="also record each episode's highest success probability, in a model with this threshold")
    r.add_argument("--probe-horizon", type=int, default=100, help="the probe's horizon (steps)")
    b = sub.add_parser("by-run", help="agreement per run of a rank JSON, intervals over checkpoints")
    b.add_argument("rank_json")
    th = sub.add_parser("thresholds", help="model success and agreement per success threshold (rank --probe)")
    th.add_argument("rank_json")
    th.add_argument("--ts", default="0.1,0.2,0.3,0.5,0.7,0.9")
    t = sub.add_parser("transfer")
    t.add_argument("--wm", required=True)
    t.add_argument("--start", required=True, help="the weak checkpoint to start from")
    t.add_argument("--steps", type=int, default=300_000)
    t.add_argument("--num-envs", type=int, default=128)
    t.add_argument("--eval-every", type=int, default=10)
    t.add_argument("--seeds", type=int, default=128)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--reward-mode", default="dense", choices=["dense", "sparse", "task"],
                   help="the model's reward head, 1 when its success head fires, or the task's own "
                        "progress and success on the decoded state")
    t.add_argument("--rollout", default="mean", choices=["mean", "members"],
                   help="the model env's rollout (sims/world_model/rollout.py)")
    t.add_argument("--model-noise", type=float, default=0.0,
                   help="the model env's model_noise: Gaussian noise per step, x its one-step error std")
    t.add_argument("--save", default=None, help="save the final policy here (save_pretrained)")
    h = sub.add_parser("throughput")
    h.add_argument("--wm", required=True)
    h.add_argument("--num-envs", type=int, default=64)
    h.add_argument("--steps", type=int, default=50)
    for s in (r, t, h):
        s.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.cmd == "by-run":
        print(json.dumps(by_run(json.loads(Path(args.rank_json).read_text())["rows"]), indent=1))
        return
    if args.cmd == "thresholds":
        print(json.dumps(thresholds(json.loads(Path(args.rank_json).read_text()),
                                    [float(t) for t in args.ts.split(",")]), indent=1))
        return
    result = {"rank": cmd_rank, "transfer": cmd_transfer, "throughput": cmd_throughput}[args.cmd](args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result["agreement"] if args.cmd == "rank" else result if args.cmd == "throughput" else
                     {k: result[k] for k in ("lift_sim", "best_sim")}, indent=1))


if __name__ == "__main__":
    main()
