"""On-robot RL on the digital twin over DDS: success on held-out seeds against robot time.

    python benchmarks/bench_robot_rl.py run --out runs/robot_rl/operator --operator [--seed S] [overrides ...]
    python benchmarks/bench_robot_rl.py run --out runs/robot_rl/no_operator [--seed S] [overrides ...]
    python benchmarks/bench_robot_rl.py plot runs/robot_rl/operator runs/robot_rl/no_operator --png docs/img/robot_rl_lift.png

`run` collects the demonstrations (embodied collect Reach, seeds 0..), starts the twin
(`embodied robot-sim Reach --image-size 0`) and, with --operator, the scripted operator
(`embodied robot-operator Reach`), on a loopback-only DDS domain, then runs
`embodied finetune-robot configs/finetune/finetune_reach.yaml` (--config NAME for another, e.g.
finetune_reach_noop with --demos 20; actor and learner processes) with the overrides. Everything
it starts is stopped at the end. The curve is run_dir/progress.jsonl.
`plot` also takes finetune run_dirs themselves (e.g. the in-process residual runs of
configs/finetune/finetune_reach_residual.yaml; --ylabel names what was evaluated).

    python benchmarks/bench_robot_rl.py verdicts runs/clf_s0 [runs/clf_s1 ...]

`verdicts`: for runs whose training episodes a success classifier ended on the in-process twin
(robot.success: classifier with sim:, progress lines with twin_success), the held-out success
before and after, and over the training episodes how often the classifier agreed with the twin:
successes both saw, false successes (the classifier's, the twin not there), missed successes (the
twin's, the classifier silent until the time limit) and the steps the classifier came late by."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(args: argparse.Namespace) -> int:
    from robot_bridge.transport import loopback_env

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    domain = args.domain if args.domain is not None else 100 + random.randrange(100)
    env = {**os.environ, **loopback_env(domain, out / "dds"), "OMP_NUM_THREADS": "1",
           "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "embodied.cli"]
    demos = out / "demos"
    if not demos.exists():
        subprocess.run(cli + ["collect", "Reach", "--episodes", str(args.demos), "--out", str(demos)], env=env,
                       check=True, capture_output=True)
    procs = [subprocess.Popen(cli + ["robot-sim", "Reach", "--image-size", "0", "--transport", "dds",
                               "--seed", str(args.seed), *(["--free-run"] if args.free_run else [])], env=env,
                              stdout=open(out / "sim.log", "a"), stderr=subprocess.STDOUT)]
    if args.operator:
        procs.append(subprocess.Popen(cli + ["robot-operator", "Reach", "--transport", "dds"], env=env,
                                      stdout=open(out / "operator.log", "a"), stderr=subprocess.STDOUT))
    t0 = time.monotonic()
    try:
        cmd = cli + ["finetune-robot", str(ROOT / "configs" / "finetune" / f"{args.config}.yaml"), f"run_dir={out / 'run'}",
                     f"demos={demos}", f"actor.seed={args.seed}", f"learner.seed={args.seed}", *args.overrides]
        rc = subprocess.run(cmd, env=env).returncode
    finally:
        for p in reversed(procs):
            _stop(p)
    print(json.dumps({"out": str(out), "exit_code": rc, "wall_s": round(time.monotonic() - t0, 1)}))
    return rc


def read_progress(out: Path) -> list[dict]:
    """progress.jsonl of a `run` output folder (out/run/) or of a finetune run_dir itself."""
    path = out / "run" / "progress.jsonl" if (out / "run").is_dir() else out / "progress.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for d in args.runs:
        rows = read_progress(Path(d))
        ev = [r for r in rows if r["kind"] == "eval"]
        eps = [r for r in rows if r["kind"] == "episode"]
        label = Path(d).name
        ax1.plot([r["robot_time_s"] / 60 for r in ev], [r["success"] for r in ev], "o-", label=label)
        k = 10  # intervened steps / steps over the last k episodes
        ivr = [sum(r["interventions"] for r in eps[max(0, i - k + 1):i + 1])
               / max(sum(r["steps"] for r in eps[max(0, i - k + 1):i + 1]), 1) for i in range(len(eps))]
        ax2.plot([r["episode"] for r in eps], ivr, "-", label=label)
        print(json.dumps({"run": label, "evals": [(r["episode"], round(r["robot_time_s"] / 60, 2), r["success"]) for r in ev]}))
    ax1.set_xlabel("robot time on the twin (min, training and evaluation)")
    ax1.set_ylabel(args.ylabel)
    ax1.set_ylim(-0.02, 1.02)
    ax1.legend()
    ax2.set_xlabel("training episode")
    ax2.set_ylabel("intervention rate (last 10 episodes)")
    ax2.set_ylim(-0.02, 1.02)
    fig.suptitle(args.title, fontsize=9)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    return 0


def verdicts(args: argparse.Namespace) -> int:
    for d in args.runs:
        rows = read_progress(Path(d))
        ev = [r["success"] for r in rows if r["kind"] == "eval"]
        eps = [r for r in rows if r["kind"] == "episode"]
        if not eps or "twin_success" not in eps[0]:
            print(f"bench_robot_rl: error: {d}: no twin_success in progress.jsonl (a run with robot.success: "
                  "classifier and sim:)", file=sys.stderr)
            return 2
        both = [r for r in eps if r["success"] and r["twin_success"]]
        late = [r["steps"] - r["twin_success_step"] - 1 for r in both]  # 0: the same step as the twin
        held = [r["steps"] - r["twin_success_step"] - 1 for r in eps if r["twin_success"] and not r["success"]]
        iv = [sum(r["interventions"] for r in eps[i:i + 25]) for i in (0, max(len(eps) - 25, 0))]
        # the operator's steps until the twin's success (the held frames after a missed one make no progress,
        # so the takeover rule acts on them too); from the recordings, one per progress line
        from embodied.data.dataset import read_episodes

        run_dir = Path(d) / "run" if (Path(d) / "run").is_dir() else Path(d)
        acting = [int(ep["intervened"][:r["steps"] if r["twin_success_step"] is None else r["twin_success_step"] + 1]
                      .sum()) for ep, r in zip(read_episodes(run_dir / "online"), eps)]
        iv_acting = [sum(acting[i:i + 25]) for i in (0, max(len(eps) - 25, 0))]
        print(json.dumps({"run": Path(d).name, "evals": ev, "episodes": len(eps),
                          "classifier_successes": sum(r["success"] for r in eps),
                          "twin_successes": sum(r["twin_success"] for r in eps), "both": len(both),
                          "false_successes": sum(r["success"] and not r["twin_success"] for r in eps),
                          "missed_successes": sum(r["twin_success"] and not r["success"] for r in eps),
                          "late": sum(v > 0 for v in late), "late_steps": sum(late), "held_steps": sum(held),
                          "train_steps": eps[-1]["train_steps"], "interventions_first_last_25": iv,
                          "interventions_until_twin_success_first_last_25": iv_acting}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--operator", action="store_true")
    r.add_argument("--demos", type=int, default=4)
    r.add_argument("--config", default="finetune_reach", help="a finetune config in configs/ over ROS 2 "
                                                              "(finetune_reach_noop: no interventions)")
    r.add_argument("--domain", type=int, help="ROS domain (default: random in 100..199); runs at the same "
                                              "time need different ones")
    r.add_argument("--free-run", action="store_true", help="the twin steps at its own rate (20 Hz)")
    r.add_argument("--seed", type=int, default=0, help="the twin's seed stream, the actor's and the learner's")
    r.add_argument("overrides", nargs="*")
    r.set_defaults(fn=run)
    pl = sub.add_parser("plot")
    pl.add_argument("runs", nargs="+")
    pl.add_argument("--png", required=True)
    pl.add_argument("--title", default="")
    pl.add_argument("--ylabel", default="success, held-out seeds (over DDS)")
    pl.set_defaults(fn=plot)
    v = sub.add_parser("verdicts")
    v.add_argument("runs", nargs="+")
    v.set_defaults(fn=verdicts)
    args = p.parse_args()
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
