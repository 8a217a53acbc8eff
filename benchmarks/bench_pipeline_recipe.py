"""Env steps per second of a training recipe through roles, synchronous vs pipelined.

Whole PPO iterations of a recipe config (collect, update, weight push), as `embodied train
CONFIG train.placement=collocated` (2 env workers, 1 stage) and `train.placement=pipelined`
(2 env workers, 2 stages: one stage's envs step on their worker's thread while the policy
infers for the other) run them with backend local, without evaluation or checkpoints. After
one warm-up iteration per run, `--iterations` iterations are timed; runs alternate between the
modes, `--repeats` times each. Printed per mode (medians over the runs): env steps/s of the
whole iterations and of the collection alone, the ratio to sync, the CPU seconds this process
got per wall second (cpu/wall: on 2 cores a pipeline pays only where it gets near 2), the CPU
milliseconds per env step (what pipelining costs, whatever the load), and each role's busy
seconds per iteration with their CPU seconds (measured inside the roles, as TensorBoard's
time/<role>_busy_seconds; idle = the iteration's wall seconds minus busy).

--stale K instead compares train.max_staleness K with 0 on Ray (2 env workers, 1 stage,
`ray.init(num_cpus=2)`; the learner in its own process, so its update can overlap the next
collection), or with `--backend local` in this process (the learner on a thread of its own
when K > 0, inline when synchronous): `train_roles` runs 1 + `--iterations` + K iterations
per run and times the logging windows (a role's busy plus idle seconds in the history) of
iterations 1 to `--iterations`: each holds one update and one collect. The first window is the warm-up (with
K > 0 it also holds the first K collects ahead) and the last K hold updates only (the drain).

Usage: python benchmarks/bench_pipeline_recipe.py configs/rl/rl_pushcube_flow_noise.yaml
           [--iterations 3] [--repeats 2] [--stale K [--backend ray|local]] [--set policy.init_from=DIR ...]
A VLA recipe starts from its SFT checkpoint (policy.init_from); its weights do not change
the work per step, any checkpoint of the same architecture measures the same. The load
average is printed before and after: with other jobs on the machine the ratio is not the
pipeline's (Linux's autogroup scheduling, docs/distributed.md "Pipelined rollout").
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import torch

from embodied.config import ExperimentConfig, load_config
from embodied.distributed.backend import LocalBackend
from embodied.distributed.loop import build_roles, role_times
from embodied.distributed.placement import preset

ROLES = ("env", "rollout", "learner")


def cpu_seconds() -> float:
    """CPU seconds of this process so far, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(cfg: ExperimentConfig, mode: str, iterations: int) -> dict[str, float]:
    """One run: build the roles, one warm-up iteration, `iterations` timed ones -> env steps/s
    (whole iterations, collection alone), cpu/wall, CPU ms per env step, role busy/CPU seconds
    per iteration."""
    torch.set_num_threads(1)
    torch.manual_seed(cfg.train.seed)
    place = preset("pipelined" if mode == "pipelined" else "collocated", env_workers=2)
    backend = LocalBackend(place)
    try:
        collector, learners = build_roles(cfg, place, backend)
        b, learner = backend, learners[0]
        first = collector.reset(seed=cfg.train.seed)
        b.get(b.call(learner, "observe", first))
        collector.set_weights(*b.get(b.call(learner, "weights")))

        def iteration() -> tuple[int, float]:
            batch = collector.collect()
            b.get(b.call(learner, "update", batch.traj))
            collector.set_weights(*b.get(b.call(learner, "weights")))
            return batch.env_steps, batch.seconds["collect"]

        iteration()  # warm-up
        role_times(b, collector, learners, 0.0)  # zero the roles' counters
        t, c, steps, collect_s = time.perf_counter(), cpu_seconds(), 0, 0.0
        for _ in range(iterations):
            n, s = iteration()
            steps, collect_s = steps + n, collect_s + s
        wall, cpu = time.perf_counter() - t, cpu_seconds() - c
        roles = role_times(b, collector, learners, wall)
        out = {"steps_per_s": steps / wall, "collect_steps_per_s": steps / collect_s, "cpu_wall": cpu / wall,
               "cpu_ms_per_step": cpu / steps * 1e3, "iteration_s": wall / iterations}
        out.update({k: v / iterations for k, v in roles.items()})
        return out
    finally:
        backend.shutdown()


def run_stale(cfg: ExperimentConfig, k: int, iterations: int, backend: str) -> dict[str, float]:
    """One run on `backend` through train_roles with max_staleness k -> the same keys as `run`
    (the collection alone and CPU time are not measured: on Ray the roles are other processes)."""
    from embodied.distributed.loop import train_roles

    hist = train_roles(cfg, preset("collocated", env_workers=2), backend, 1 + iterations + k,
                       max_staleness=k)["history"]
    timed = hist[1:1 + iterations]  # one update and one collect each (module doc)
    wall = sum(h["learner_busy_seconds"] + h["learner_idle_seconds"] for h in timed)
    out = {"steps_per_s": sum(h["env_steps"] for h in timed) / wall, "iteration_s": wall / iterations,
           "staleness": max(h["staleness"] for h in timed)}
    out.update({f"{r}_{x}_seconds": statistics.mean(h[f"{r}_{x}_seconds"] for h in timed)
                for r in ROLES for x in ("busy", "cpu")})
    return out


def stale(cfg: ExperimentConfig, args: argparse.Namespace) -> None:
    """Print max_staleness K vs 0 on args.backend (module doc)."""
    if args.backend == "ray":
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        runs: dict[str, list[dict[str, float]]] = {"sync": [], f"stale {args.stale}": []}
        for _ in range(args.repeats):
            for mode in runs:
                r = run_stale(cfg, 0 if mode == "sync" else args.stale, args.iterations, args.backend)
                runs[mode].append(r)
                print(f"  {mode:<8} {r['steps_per_s']:7.1f} env steps/s, {r['iteration_s']:.1f} s per iteration, "
                      f"staleness up to {r['staleness']:.0f}; load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        if args.backend == "ray":
            ray.shutdown()
    med = {mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in runs.items()}
    sync = med["sync"]["steps_per_s"]
    print(f"{'mode':<8} {'env steps/s':>11} {'vs sync':>8}  busy (CPU) s per iteration: env, rollout, learner")
    for mode, m in med.items():
        busy = ", ".join(f"{m[f'{k}_busy_seconds']:.2f} ({m[f'{k}_cpu_seconds']:.2f})" for k in ROLES)
        print(f"{mode:<8} {m['steps_per_s']:>11.1f} {m['steps_per_s'] / sync:>7.2f}x  {busy}; "
              f"{m['iteration_s']:.1f} s wall")
    print(f"load average after {os.getloadavg()[0]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", help="a recipe config (PPO), e.g. configs/rl/rl_pushcube_flow_noise.yaml")
    ap.add_argument("--iterations", type=int, default=3, help="timed iterations per run")
    ap.add_argument("--repeats", type=int, default=2, help="runs per mode (alternating)")
    ap.add_argument("--stale", type=int, default=0, metavar="K",
                    help="compare train.max_staleness K with 0 instead (module doc)")
    ap.add_argument("--backend", choices=("ray", "local"), default="ray", help="the --stale runs' backend")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    args = ap.parse_args()
    cfg = load_config(args.config, args.set)
    if cfg.train.algorithm != "ppo":
        raise SystemExit(f"train.algorithm: {cfg.train.algorithm!r}; allowed: ppo (GRPO runs one stage)")
    if args.stale < 0:
        raise SystemExit(f"--stale: {args.stale}; allowed: an integer >= 1 (0: the pipeline comparison)")
    per_it = cfg.env.num_envs * cfg.ppo.rollout_steps
    if args.stale:
        print(f"{args.config}: {cfg.env.task}, {cfg.env.num_envs} envs x {cfg.ppo.rollout_steps} policy steps per "
              f"iteration, {args.iterations} timed iterations x {args.repeats} runs per mode, backend {args.backend}, "
              f"2 env workers; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        stale(cfg, args)
        return
    print(f"{args.config}: {cfg.env.task}, {cfg.env.num_envs} envs x {cfg.ppo.rollout_steps} policy steps per "
          f"iteration, {args.iterations} timed iterations x {args.repeats} runs per mode, backend local, 2 env "
          f"workers, torch 1 thread; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    runs: dict[str, list[dict[str, float]]] = {"sync": [], "pipelined": []}
    for _ in range(args.repeats):
        for mode in runs:
            runs[mode].append(run(cfg, mode, args.iterations))
            r = runs[mode][-1]
            print(f"  {mode:<9} {r['steps_per_s']:7.1f} env steps/s (collect {r['collect_steps_per_s']:.1f}), "
                  f"{r['iteration_s']:.1f} s per iteration of ~{per_it} policy steps; load {os.getloadavg()[0]:.2f}",
                  flush=True)
    med = {mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in runs.items()}
    sync = med["sync"]
    print(f"{'mode':<10} {'env steps/s':>11} {'vs sync':>8} {'collect/s':>10} {'vs sync':>8} {'cpu/wall':>9} "
          f"{'CPU ms/step':>12}  busy (CPU) s per iteration: env, rollout, learner")
    for mode, m in med.items():
        busy = ", ".join(f"{m[f'{k}_busy_seconds']:.2f} ({m[f'{k}_cpu_seconds']:.2f})" for k in ROLES)
        print(f"{mode:<10} {m['steps_per_s']:>11.1f} {m['steps_per_s'] / sync['steps_per_s']:>7.2f}x "
              f"{m['collect_steps_per_s']:>10.1f} {m['collect_steps_per_s'] / sync['collect_steps_per_s']:>7.2f}x "
              f"{m['cpu_wall']:>9.2f} {m['cpu_ms_per_step']:>12.2f}  {busy}; {m['iteration_s']:.1f} s wall")
    print(f"ratio pipelined / sync, whole iterations: {med['pipelined']['steps_per_s'] / sync['steps_per_s']:.2f}x; "
          f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
