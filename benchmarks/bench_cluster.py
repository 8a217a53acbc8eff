"""Ray across hosts: the state PPO recipe (configs/ppo/ppo_pushcube.yaml) run by `embodied train`
from a driver on a head host, with hosts made as network namespaces of this machine and started
by launch/ray_head.sh and launch/ray_worker.sh (tests/distributed/netns_cluster.py; root only).

    one host    the head alone with N logical CPUs: every role on it
    two hosts   the head (1 CPU, role=learner) and a worker host (N - 1 CPUs, role=env) with
                the env workers: the same total CPUs, the env traffic over the veth link
    host loss   the head and two env hosts: one env host's link is cut after a few iterations,
                brought back, and its Ray node started again. Measured: seconds from the cut to
                the env worker rebuilt on the other host (Ray's health checks declare the host
                dead first: tests/distributed/netns_cluster.py's FAST_FAILURE settings), seconds from the
                host's return to an env worker moved back to it, episodes dropped.

All hosts share this machine's cores: the two-host figure measures what the split and the
link cost, not what a second machine adds. Steps/s is the median of time/steps_per_second over
the iterations after the first two. Repeats alternate the layouts.

    in a row    (--cuts-in-a-row N) one run through N host losses: env1 and env0 in turn, two
                link cuts then two killed raylets, each host back and a worker moved to it before
                the next loss; then SIGINT keeps the run.

Usage: python benchmarks/bench_cluster.py [--iterations 8] [--loss-iterations 30] [--repeats 3] [--cpus 3] [--out FILE]
       python benchmarks/bench_cluster.py --cuts-in-a-row 10 [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "distributed")]

from netns_cluster import FAST_FAILURE, Host, NetnsCluster  # noqa: E402


def tb_scalars(run: Path, tag: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    return [e.value for e in EventAccumulator(str(run / "tb")).Reload().Scalars(tag)]


def train_argv(c: NetnsCluster, run: Path, steps: int, env_labels: str, extra: list[str]) -> list[str]:
    placement = (f"{{preset: disaggregated, address: '{c.address}', env: {{count: 2, num_cpus: 0.5"
                 f"{env_labels}}}}}")
    return [sys.executable, "-m", "embodied.cli", "train", "configs/ppo/ppo_pushcube.yaml", "train.backend=ray",
            f"train.placement={placement}", f"train.total_steps={steps}", f"train.run_dir={run}",
            "train.eval_every=0", "train.eval_episodes=8", "train.video_episodes=0", "train.progress=false",
            "train.save_every=0", *extra]


def drive(c: NetnsCluster, argv: list[str]) -> tuple[subprocess.Popen, list[tuple[float, str]]]:
    """The driver on the head; its output lines with their arrival times, read on a thread."""
    proc = c.popen("head", argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                   env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    lines: list[tuple[float, str]] = []
    threading.Thread(target=lambda: lines.extend((time.time(), ln) for ln in proc.stdout), daemon=True).start()
    return proc, lines


def wait_for(proc: subprocess.Popen, lines: list[tuple[float, str]], text: str, timeout: float) -> float:
    t = time.time()
    while True:
        for at, line in lines:
            if text in line:
                return at
        if proc.poll() is not None or time.time() - t > timeout:
            raise RuntimeError(f"no {text!r}:\n" + "".join(ln for _, ln in lines)[-3000:])
        time.sleep(0.1)


def throughput(layout: str, cpus: float, iterations: int, steps_per_iter: int, tmp: Path) -> dict:
    if layout == "one host":
        c = NetnsCluster([], head_cpus=cpus, head_labels="", env=FAST_FAILURE)
        labels = ""
    else:
        c = NetnsCluster([Host("env0", cpus - 1, "role=env")], head_cpus=1, env=FAST_FAILURE)
        labels = ", labels: {role: env}"
    with c:
        run = tmp / f"{layout.replace(' ', '_')}_{time.time_ns()}"
        proc, lines = drive(c, train_argv(c, run, iterations * steps_per_iter, labels, []))
        proc.wait(timeout=1800)
        if proc.returncode:
            raise RuntimeError("".join(ln for _, ln in lines)[-3000:])
        sps = tb_scalars(run, "time/steps_per_second")[2:]
        roles = next(ln for _, ln in lines if ln.startswith("roles:")).strip()
    return {"layout": layout, "steps_per_second": statistics.median(sps), "roles": roles}


def host_loss(cpus: float, iterations: int, steps_per_iter: int, tmp: Path, mode: str = "link") -> dict:
    """mode "link": the host's link goes down; "raylet": its raylet is killed (SIGKILL)."""
    c = NetnsCluster([Host("env0", (cpus - 1) / 2, "role=env"), Host("env1", (cpus - 1) / 2, "role=env")],
                     head_cpus=1, env=FAST_FAILURE)
    with c:
        run = tmp / f"loss_{time.time_ns()}"
        proc, lines = drive(c, train_argv(c, run, iterations * steps_per_iter, ", labels: {role: env}", []))
        try:
            wait_for(proc, lines, "roles:", 300)
            time.sleep(3)
            t_cut = time.time()
            if mode == "link":
                c.cut("env1")
            else:
                os.kill(c.raylet_pid("env1"), 9)
            t_rebuilt = wait_for(proc, lines, "lost: rebuilt", 300)
            c.restore("env1")
            t_back = time.time()
            restart_s = c.restart("env1")
            t_moved = wait_for(proc, lines, "moved to", 300)
            proc.wait(timeout=1800)
        finally:
            if proc.poll() is None:
                proc.kill()
        events = [ln.strip() for _, ln in lines if "lost: rebuilt" in ln or "moved to" in ln]
        return {"mode": mode, "cut_to_rebuilt_s": t_rebuilt - t_cut, "host_back_to_moved_s": t_moved - t_back,
                "ray_worker_restart_s": restart_s, "dropped_episodes": tb_scalars(run, "rollout/dropped_episodes")[-1],
                "env_worker_restarts": tb_scalars(run, "rollout/env_worker_restarts")[-1], "events": events,
                "exit": proc.returncode}


def wait_for_count(proc: subprocess.Popen, lines: list[tuple[float, str]], text: str, n: int, timeout: float) -> float:
    """The arrival time of the n-th line (1-based) holding text."""
    t = time.time()
    while True:
        hits = [at for at, line in lines if text in line]
        if len(hits) >= n:
            return hits[n - 1]
        if proc.poll() is not None or time.time() - t > timeout:
            raise RuntimeError(f"no {text!r} number {n}:\n" + "".join(ln for _, ln in lines)[-3000:])
        time.sleep(0.1)


def rejoin(c: NetnsCluster, host: str, tries: int = 3) -> tuple[float, int]:
    """The host's Ray node started again as an operator would: `ray start` retried when it times
    out (under load the head's GCS can miss a start-up deadline) -> (seconds, starts)."""
    t = time.time()
    for k in range(1, tries + 1):
        try:
            c.restart(host)
            return time.time() - t, k
        except RuntimeError as e:
            if k == tries:
                raise
            print(f"  ray start on {host} failed ({str(e).splitlines()[-1][:120]}); again", flush=True)
    raise AssertionError("unreachable")


def cuts_in_a_row(cpus: float, cuts: int, steps_per_iter: int, tmp: Path) -> dict:
    """One run, `cuts` host losses one after another: env1 and env0 in turn, two link cuts then
    two killed raylets; each time the worker is rebuilt on the other host, the host returns and a
    worker moves back to it before the next loss. Then SIGINT, which keeps the run."""
    c = NetnsCluster([Host("env0", (cpus - 1) / 2, "role=env"), Host("env1", (cpus - 1) / 2, "role=env")],
                     head_cpus=1, env=FAST_FAILURE)
    with c:
        run = tmp / f"row_{time.time_ns()}"
        proc, lines = drive(c, train_argv(c, run, 10**6 * steps_per_iter, ", labels: {role: env}", []))
        losses = []
        try:
            wait_for(proc, lines, "roles:", 300)
            for i in range(cuts):
                host, mode = ("env1", "env0")[i % 2], ("link", "link", "raylet", "raylet")[i % 4]
                time.sleep(3)
                t_cut = time.time()
                if mode == "link":
                    c.cut(host)
                else:
                    os.kill(c.raylet_pid(host), 9)
                t_rebuilt = wait_for_count(proc, lines, "lost: rebuilt", i + 1, 300)
                c.restore(host)
                t_back = time.time()
                restart_s, starts = rejoin(c, host)
                t_moved = wait_for_count(proc, lines, "moved to", i + 1, 300)
                losses.append({"host": host, "mode": mode, "cut_to_rebuilt_s": t_rebuilt - t_cut,
                               "host_back_to_moved_s": t_moved - t_back, "ray_worker_restart_s": restart_s,
                               "ray_start_tries": starts})
                print(f"  loss {i + 1}/{cuts} ({host}, {mode}): rebuilt {t_rebuilt - t_cut:.1f}s after it, "
                      f"moved back {t_moved - t_back:.1f}s after the host returned", flush=True)
            proc.send_signal(2)
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
        return {"losses": losses, "exit": proc.returncode,
                "dropped_episodes": tb_scalars(run, "rollout/dropped_episodes")[-1],
                "kept": [ln.strip() for _, ln in lines[-5:]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--loss-iterations", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpus", type=float, default=3, help="logical Ray CPUs in all (one host / two hosts)")
    ap.add_argument("--loss-modes", default="link,raylet", help="link (cut), raylet (killed), or both")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--cuts-in-a-row", type=int, default=0,
                    help="instead of the above: N host losses in one run (link and raylet, both hosts in turn)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    steps_per_iter = 128 * 32  # configs/ppo/ppo_pushcube.yaml: 128 envs x ppo.rollout_steps 32
    results: dict = {"throughput": [], "host_loss": [], "load_before": os.getloadavg()}
    if args.cuts_in_a_row:
        with tempfile.TemporaryDirectory(prefix="bench_cluster_") as tmp:
            res = cuts_in_a_row(args.cpus, args.cuts_in_a_row, steps_per_iter, Path(tmp))
        res["load_before"], res["load_after"] = results["load_before"], os.getloadavg()
        print(f"{len(res['losses'])} of {args.cuts_in_a_row} losses survived; exit {res['exit']} after SIGINT; "
              f"{res['dropped_episodes']:.0f} episodes dropped", flush=True)
        if args.out:
            args.out.write_text(json.dumps(res, indent=1))
        sys.exit(0 if len(res["losses"]) == args.cuts_in_a_row else 1)
    with tempfile.TemporaryDirectory(prefix="bench_cluster_") as tmp:
        for r in range(0 if args.skip_throughput else args.repeats):
            for layout in ("one host", "two hosts") if r % 2 == 0 else ("two hosts", "one host"):
                res = throughput(layout, args.cpus, args.iterations, steps_per_iter, Path(tmp))
                results["throughput"].append(res)
                print(f"{layout:10s} {res['steps_per_second']:8.1f} env steps/s   {res['roles']}", flush=True)
        for _, mode in ((r, m) for r in range(args.repeats) for m in args.loss_modes.split(",")):
            res = host_loss(args.cpus, args.loss_iterations, steps_per_iter, Path(tmp), mode)
            results["host_loss"].append(res)
            print(f"host loss ({mode}): rebuilt {res['cut_to_rebuilt_s']:.1f}s after the cut, moved back "
                  f"{res['host_back_to_moved_s']:.1f}s after the host returned (ray_worker.sh "
                  f"{res['ray_worker_restart_s']:.1f}s), {res['dropped_episodes']:.0f} episodes dropped, exit "
                  f"{res['exit']}", flush=True)
    results["load_after"] = os.getloadavg()
    if results["throughput"]:
        med = {lay: statistics.median(x["steps_per_second"] for x in results["throughput"] if x["layout"] == lay)
               for lay in ("one host", "two hosts")}
        print(f"\n| layout | env steps/s (median of {args.repeats}) |\n| --- | --- |")
        for lay, v in med.items():
            print(f"| {lay} | {v:.1f} |")
        print(f"two hosts / one host: {med['two hosts'] / med['one host']:.2f}x")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
