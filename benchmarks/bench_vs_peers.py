"""Env steps and wall time to 90% success: our PPO against stable-baselines3's and rsl_rl's.

Every framework trains on the same MujocoVecEnv (128 envs, privileged state, dense reward) for
32 steps per env per iteration, with a 256x256 tanh actor and critic. After every --eval-every
iterations (default 5, about 20k env steps) the clock is paused and the deterministic policy
runs one episode on each of 64 fixed seeds (embodied.rl.train.eval_seeds) of a separate 64-env
copy; a run stops at the first evaluation with success >= 0.9, or at its caps. Wall time counts
collect + update only. Runs are sequential, torch uses one thread, the env --env-threads physics
threads (default: all cores).

    python benchmarks/bench_vs_peers.py                      # PushCube and PickCube, 5 seeds
    python benchmarks/bench_vs_peers.py --tasks PushCube --seeds 3 --only ours:recipe,sb3:vecnorm
    python benchmarks/bench_vs_peers.py --merge runs/a,runs/b --out runs/ab   # one report of several runs

Each framework runs its recommended settings and at most two variants (VARIANTS below); the
report gives every variant and marks each framework's better one (more seeds at the target, then
fewer mean seconds over the seeds, a run that never reached the target counting its cap).
Intervals are 95% t-intervals over seeds. Writes --out/results.json (every run, every evaluation) and --out/report.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.peer_adapters import (RslRlEvalPolicy, Sb3EvalPolicy, make_rsl_rl_vecenv,  # noqa: E402
                                      make_sb3_vecenv)
from embodied.config import load_config  # noqa: E402
from embodied.eval.evaluate import evaluate  # noqa: E402
from embodied.rl.learner import PPOLearner  # noqa: E402
from embodied.rl.rollout import RolloutCollector  # noqa: E402
from embodied.run.env import build_env, eval_seeds  # noqa: E402
from policies.registry import build_policy  # noqa: E402
from sims.registry import make_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NUM_ENVS, ROLLOUT, EVAL_EPISODES, TARGET = 128, 32, 64, 0.9
ENV_THREADS = 0  # physics threads of every framework's env (0: all cores); set by --env-threads
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}

# framework -> variant -> settings. The first variant of each is the recommended one.
VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    # our recipe (configs/ppo/ppo_<task>.yaml: reward scaling, 5 epochs x 8 minibatches; PickCube's
    # also no value clip and an initial action std of 1.0), and PPOConfig's defaults (no reward
    # scaling, 5 x 4), the recipe before 2026-11-24
    "ours": {"recipe": {}, "defaults_5x4": {"ppo.normalize_rewards": False, "ppo.epochs": 5,
                                            "ppo.minibatches": 4}},
    # rl-zoo's practice for many-env continuous control: VecNormalize on observations and
    # rewards, a 1024 batch (4 minibatches of a 4096 rollout), 5 epochs, lr 3e-4; the variant
    # drops reward normalisation to see what it is worth
    "sb3": {"vecnorm": {"norm_reward": True}, "vecnorm_obs_only": {"norm_reward": False}},
    # rsl_rl's standard PPO (Isaac Lab's configs: entropy 0.01) with its obs normalisation
    "rsl_rl": {"entropy_0.01": {"entropy_coef": 0.01}, "entropy_0": {"entropy_coef": 0.0}},
}


@dataclass
class RunResult:
    task: str
    framework: str
    variant: str
    seed: int
    reached: bool
    seconds: float  # training wall time until success >= TARGET, or until the cap
    env_steps: int  # env steps until success >= TARGET, or until the cap
    best_success: float
    evals: list[tuple[int, float, float]]  # (env steps, train seconds, success) at each evaluation
    load: float | None = None  # mean 1-minute load average of the machine at the evaluations


def run_ours(task: str, seed: int, settings: dict[str, Any]) -> tuple[Callable, Callable, int, Callable]:
    """Our recipe, driven by a loop mirroring embodied/rl/train.py."""
    overrides = [f"env.task={task}", f"env.num_envs={NUM_ENVS}", f"env.num_threads={ENV_THREADS}",
                 f"ppo.rollout_steps={ROLLOUT}", f"train.seed={seed}"] + [f"{k}={v}" for k, v in settings.items()]
    recipe = ROOT / "configs" / "ppo" / f"ppo_{task.lower()}.yaml"  # ppo/ppo_pushcube.yaml, ppo/ppo_pickcube.yaml
    cfg = load_config(recipe if recipe.exists() else ROOT / "configs" / "ppo" / "ppo_pushcube.yaml", overrides)
    torch.manual_seed(seed)
    env = build_env(cfg.env)
    policy = build_policy(cfg.policy, env.spec)
    learner = PPOLearner(policy, cfg.ppo)
    collector = RolloutCollector(env, policy, cfg.ppo.rollout_steps)
    eval_env = build_env(cfg.env, EVAL_EPISODES)
    collector.reset(seed=seed)
    policy.update_normalizer(collector.obs)

    def train_iters(n: int) -> None:
        for _ in range(n):
            traj = collector.collect()
            learner.update(traj)
            policy.update_normalizer(traj.obs)
            collector.pop_episode_stats()

    def success() -> float:
        return evaluate(policy, eval_env, eval_seeds(EVAL_EPISODES)).success_rate

    return train_iters, success, NUM_ENVS * ROLLOUT, lambda: (env.close(), eval_env.close())


def run_sb3(task: str, seed: int, settings: dict[str, Any]) -> tuple[Callable, Callable, int, Callable]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    torch.manual_seed(seed)
    env = make_env(task, NUM_ENVS, obs_mode="state", reward_mode="dense", num_threads=ENV_THREADS)
    venv = VecNormalize(make_sb3_vecenv(env, seed), norm_obs=True, norm_reward=settings["norm_reward"],
                        gamma=0.99)
    model = PPO("MlpPolicy", venv, n_steps=ROLLOUT, batch_size=NUM_ENVS * ROLLOUT // 4, n_epochs=5,
                learning_rate=3e-4, gamma=0.99, gae_lambda=0.95, clip_range=0.2, ent_coef=0.0,
                max_grad_norm=0.5, policy_kwargs={"net_arch": [256, 256], "activation_fn": torch.nn.Tanh},
                seed=seed, device="cpu", verbose=0)
    eval_env = make_env(task, EVAL_EPISODES, obs_mode="state", reward_mode="dense", num_threads=ENV_THREADS)

    def train_iters(n: int) -> None:
        model.learn(total_timesteps=n * NUM_ENVS * ROLLOUT, reset_num_timesteps=False)

    def success() -> float:
        return evaluate(Sb3EvalPolicy(model, venv), eval_env, eval_seeds(EVAL_EPISODES)).success_rate

    return train_iters, success, NUM_ENVS * ROLLOUT, lambda: (venv.close(), eval_env.close())


def rsl_rl_cfg(entropy_coef: float) -> dict[str, Any]:
    """rsl_rl 5.x runner config: its standard PPO hyperparameters, our network sizes."""
    model = {"class_name": "rsl_rl.models:MLPModel", "hidden_dims": [256, 256], "activation": "tanh",
             "obs_normalization": True}
    return {
        "num_steps_per_env": ROLLOUT, "save_interval": 10**9, "check_for_nan": True,
        "obs_groups": {"actor": ["privileged"], "critic": ["privileged"]},
        "actor": {**model, "distribution_cfg": {"class_name": "rsl_rl.modules:GaussianDistribution",
                                                "init_std": 1.0, "std_type": "scalar"}},
        "critic": dict(model),
        "algorithm": {"class_name": "rsl_rl.algorithms:PPO", "learning_rate": 1e-3, "schedule": "adaptive",
                      "desired_kl": 0.01, "num_learning_epochs": 5, "num_mini_batches": 4, "clip_param": 0.2,
                      "gamma": 0.99, "lam": 0.95, "value_loss_coef": 1.0, "use_clipped_value_loss": True,
                      "entropy_coef": entropy_coef, "max_grad_norm": 1.0},
    }


def run_rsl_rl(task: str, seed: int, settings: dict[str, Any]) -> tuple[Callable, Callable, int, Callable]:
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(seed)
    env = make_env(task, NUM_ENVS, obs_mode="state", reward_mode="dense", num_threads=ENV_THREADS)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints the models and obs groups
        runner = OnPolicyRunner(make_rsl_rl_vecenv(env, seed), rsl_rl_cfg(settings["entropy_coef"]),
                                log_dir=None, device="cpu")
    eval_env = make_env(task, EVAL_EPISODES, obs_mode="state", reward_mode="dense", num_threads=ENV_THREADS)

    def train_iters(n: int) -> None:
        runner.learn(num_learning_iterations=n)
        runner.current_learning_iteration += 1  # learn() leaves it at the last finished one

    def success() -> float:
        rate = evaluate(RslRlEvalPolicy(runner.get_inference_policy()), eval_env,
                        eval_seeds(EVAL_EPISODES)).success_rate
        runner.alg.train_mode()
        return rate

    return train_iters, success, NUM_ENVS * ROLLOUT, lambda: (env.close(), eval_env.close())


RUNNERS = {"ours": run_ours, "sb3": run_sb3, "rsl_rl": run_rsl_rl}


def iteration_cost(task: str, framework: str, variant: str, iters: int) -> float:
    """Mean wall seconds of one training iteration (collect + update of NUM_ENVS x ROLLOUT
    env steps), over iters iterations after one warm-up iteration."""
    train_iters, _, _, close = RUNNERS[framework](task, 0, VARIANTS[framework][variant])
    try:
        train_iters(1)
        t0 = time.perf_counter()
        train_iters(iters)
        return (time.perf_counter() - t0) / iters
    finally:
        close()


def drive(task: str, framework: str, variant: str, seed: int, max_steps: int, max_seconds: float,
          eval_every: int) -> RunResult:
    """Train in chunks of eval_every iterations, timing only training; evaluate between chunks."""
    train_iters, success, steps_per_iter, close = RUNNERS[framework](task, seed, VARIANTS[framework][variant])
    seconds, steps, best, evals, loads = 0.0, 0, 0.0, [], []
    try:
        while True:
            t0 = time.perf_counter()
            train_iters(eval_every)
            seconds += time.perf_counter() - t0
            steps += eval_every * steps_per_iter
            rate = success()
            best = max(best, rate)
            evals.append((steps, round(seconds, 2), rate))
            loads.append(os.getloadavg()[0])
            print(f"  [{task} {framework}:{variant} seed {seed}] {steps:>9,d} steps {seconds:7.1f} s "
                  f"success {rate:.3f} (load {loads[-1]:.1f})", flush=True)
            if rate >= TARGET or steps >= max_steps or seconds >= max_seconds:
                return RunResult(task, framework, variant, seed, rate >= TARGET, seconds, steps, best, evals,
                                 round(statistics.fmean(loads), 1))
    finally:
        close()


def mean_ci(xs: list[float]) -> tuple[float, float]:
    m = statistics.fmean(xs)
    return m, (T_975.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan"))


def report(runs: list[RunResult], metas: list[dict[str, Any]]) -> str:
    """The markdown tables of runs (from one or several results.json, each with its meta)."""
    lines = [f"Commit {m['commit']}, {m['date']}, {m['machine']}, torch {m['torch']} (1 thread); `{m['command']}`"
             for m in metas]
    loads = [r.load for r in runs if r.load is not None]
    if loads:
        lines.append(f"Load average during the runs (1 minute, at the evaluations): {min(loads):.1f}-{max(loads):.1f}")
    meta = metas[0]
    lines += ["",
             f"{NUM_ENVS} envs x {ROLLOUT} steps per iteration, privileged state, dense reward, 256x256 tanh; "
             f"stop at the first evaluation (every {meta['eval_every']} iterations, {EVAL_EPISODES} fixed "
             f"seeds) with success >= {TARGET}. Mean +- 95% t-interval over seeds; a run that never reached "
             "the target counts its cap (marked >).", ""]
    for task in dict.fromkeys(r.task for r in runs):
        lines += [f"### {task}", "", "| framework: variant | reached | env steps to 90% | seconds to 90% | "
                  "per seed (steps) |", "|---|---:|---:|---:|---|"]
        best: dict[str, tuple[float, float, str]] = {}  # fw -> (-share reached, mean seconds, variant)
        rows = {}
        for fw, var in dict.fromkeys((r.framework, r.variant) for r in runs if r.task == task):
            rs = sorted((r for r in runs if r.task == task and r.framework == fw and r.variant == var),
                        key=lambda r: r.seed)
            (sm, sc), (tm, tc) = mean_ci([r.env_steps for r in rs]), mean_ci([r.seconds for r in rs])
            rows[(fw, var)] = (rs, sm, sc, tm, tc)
            key = (-sum(r.reached for r in rs) / len(rs), tm, var)  # more seeds reached first, then seconds
            if fw not in best or key[:2] < best[fw][:2]:
                best[fw] = key
        for (fw, var), (rs, sm, sc, tm, tc) in rows.items():
            mark = " (kept)" if best[fw][2] == var else ""
            seeds = ", ".join(f"{r.env_steps / 1e3:.0f}k" if r.reached else
                              f">{r.env_steps / 1e3:.0f}k (best {r.best_success:.2f})" for r in rs)
            ci = "" if len(rs) < 2 else f" +- {sc / 1e3:.0f}k"
            at_least = "" if all(r.reached for r in rs) else ">= "  # a missed run counts its cap
            lines.append(f"| {fw}: {var}{mark} | {sum(r.reached for r in rs)}/{len(rs)} | {at_least}{sm / 1e3:.0f}k{ci} | "
                         f"{at_least}{tm:.0f}{'' if len(rs) < 2 else f' +- {tc:.0f}'} | {seeds} |")
        peers = [(k, fw) for fw, k in best.items() if fw != "ours"]
        if "ours" in best and peers:
            (_, t_peer, var_peer), fw_peer = min(peers)
            lines += ["", f"Ours / best peer ({fw_peer}: {var_peer}) in mean wall time to 90%: "
                      f"**{best['ours'][1] / t_peer:.2f}x** (target <= 0.70x)"]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="PushCube,PickCube")
    ap.add_argument("--seeds", type=int, default=5, help="N seeds: FIRST .. FIRST + N - 1")
    ap.add_argument("--first-seed", type=int, default=0, metavar="FIRST")
    ap.add_argument("--only", default="", help="comma-separated framework:variant pairs (default: all)")
    ap.add_argument("--max-steps", default="PushCube=1500000,PickCube=6000000",
                    help="env-step cap per run and task")
    ap.add_argument("--max-seconds", type=float, default=1800.0, help="training-wall-time cap per run")
    ap.add_argument("--eval-every", type=int, default=5, help="iterations between evaluations")
    ap.add_argument("--ours-variant", action="append", default=[], metavar="NAME:KEY=VALUE,...",
                    help="an extra variant of ours from config overrides, e.g. "
                         "'e5m4:ppo.epochs=5,ppo.minibatches=4' (run it with --only ours:e5m4)")
    ap.add_argument("--cost", type=int, default=0, metavar="ITERS",
                    help="only time one training iteration of every chosen variant (mean over ITERS)")
    ap.add_argument("--env-threads", type=int, default=0, help="physics threads per env (0: all cores)")
    ap.add_argument("--merge", default="", metavar="DIR,DIR,...",
                    help="only write one report of the results.json in these --out folders (runs made apart, "
                         "e.g. side by side)")
    ap.add_argument("--out", default="runs/bench_vs_peers")
    args = ap.parse_args()
    global ENV_THREADS
    ENV_THREADS = args.env_threads
    out = Path(args.out)
    if args.merge:
        metas, runs = [], []
        for folder in args.merge.split(","):
            path = Path(folder) / "results.json"
            if not path.is_file():
                sys.exit(f"--merge: {path} does not exist; allowed: folders written by --out")
            data = json.loads(path.read_text())
            metas.append(data["meta"])
            runs += [RunResult(**{**r, "evals": [tuple(e) for e in r["evals"]]}) for r in data["runs"]]
        out.mkdir(parents=True, exist_ok=True)
        text = report(runs, metas)
        (out / "report.md").write_text(text)
        print(text)
        return
    for spec in args.ours_variant:
        name, _, sets = spec.partition(":")
        if not name or not sets or any("=" not in kv for kv in sets.split(",")):
            sys.exit(f"--ours-variant: {spec!r} is not NAME:KEY=VALUE[,KEY=VALUE...]")
        VARIANTS["ours"][name] = dict(kv.split("=", 1) for kv in sets.split(","))

    torch.set_num_threads(1)
    caps = {k: int(float(v)) for k, v in (kv.split("=") for kv in args.max_steps.split(","))}
    pairs = [(fw, var) for fw, vs in VARIANTS.items() for var in vs]
    if args.only:
        wanted = args.only.split(",")
        unknown = [p for p in wanted if tuple(p.split(":", 1)) not in pairs]
        if unknown:
            sys.exit(f"--only: unknown {unknown[0]!r}; allowed: {', '.join(f'{f}:{v}' for f, v in pairs)}")
        pairs = [p for p in pairs if f"{p[0]}:{p[1]}" in wanted]
    if args.cost:  # the pairs interleaved, so that they share the machine's load
        for task in args.tasks.split(","):
            for fw, var in pairs:
                sec = iteration_cost(task, fw, var, args.cost)
                print(f"{task} {fw}:{var}: {sec:.3f} s per iteration, {NUM_ENVS * ROLLOUT / sec:,.0f} env steps/s "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    meta = {"commit": commit, "date": datetime.datetime.now().isoformat(timespec="minutes"),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "torch": torch.__version__, "eval_every": args.eval_every,
            "command": "python benchmarks/bench_vs_peers.py " + " ".join(sys.argv[1:])}
    out.mkdir(parents=True, exist_ok=True)
    runs: list[RunResult] = []
    for task in args.tasks.split(","):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for fw, var in pairs:
                runs.append(drive(task, fw, var, seed, caps.get(task, 3_000_000), args.max_seconds,
                                  args.eval_every))
                (out / "results.json").write_text(json.dumps({"meta": meta, "runs": [asdict(r) for r in runs]},
                                                              indent=1))
    text = report(runs, [meta])
    (out / "report.md").write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
