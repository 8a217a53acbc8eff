"""The RL recipes over several seeds: SFT success, RL success, mean and 95% confidence interval.

For every seed s: collect expert demos once per task (seeded by s), SFT each policy family
that the chosen recipes need (the recipe's few-shot SFT config, seed s; demos and SFT
checkpoints already in --out are reused), then run each
recipe's RL config from that SFT checkpoint (train.seed = s). Success is measured by the RL
run itself, before the first update and at the end, on the same held-out seeds.

    python benchmarks/bench_vla_recipes.py --recipes flow_noise,flow_sde --seeds 0,1,2
    python benchmarks/bench_vla_recipes.py --recipes reach_flow_noise --rl-steps 100000
    python benchmarks/bench_vla_recipes.py --merge runs/a,runs/b --out runs/all

Multi-task recipes (Compose, MetaWorld MT10) record each task's curve too, and with --held-out
the SFT start and the final policy are also evaluated on a second task (ComposeHeldOut: the
combinations no demo and no RL episode showed). SFT and RL can run on different machines:

    python benchmarks/bench_vla_recipes.py --recipes compose_grpo_flow --seeds 0 --stage sft
    python benchmarks/bench_vla_recipes.py --recipes compose_grpo_flow --seeds 0 --stage rl \
        --rl-minutes 7 --held-out ComposeHeldOut --set train.device=cuda env.num_threads=3

--stage rl reuses the SFT checkpoint in --out. --rl-minutes runs RL as `embodied train` in a
child process and sends it SIGINT after that many minutes: the run ends as a user's Ctrl-C
would (a checkpoint of its last iteration, whose summary holds the evaluations so far).

Writes <out>/results.json and <out>/success_curves.png (one panel per recipe: each seed's
curve and their mean). The 95% interval is mean +- t(0.975, n-1) * std / sqrt(n).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from embodied.data.collect import collect_demos  # noqa: E402
from embodied.config import load_config  # noqa: E402
from embodied.data.lerobot import LeRobotDataset  # noqa: E402
from embodied.imitation.sft import build_policy, load_sft_config, train_sft  # noqa: E402
from embodied.rl.train import train  # noqa: E402

CONFIGS = ROOT / "configs"
RECIPES = {  # name -> (few-shot SFT config, RL config, expert demos per seed; None: --demos)
    "flow_noise": ("sft_pushcube_flow_fewshot", "rl_pushcube_flow_noise", None),
    "flow_sde": ("sft_pushcube_flow_fewshot", "rl_pushcube_flow_sde", None),
    "grpo_flow": ("sft_pushcube_flow_fewshot", "rl_pushcube_grpo_flow", None),
    "ppo_ar": ("sft_pushcube_ar_fewshot", "rl_pushcube_ppo_ar", None),
    "grpo_ar": ("sft_pushcube_ar_fewshot", "rl_pushcube_grpo_ar", None),
    "reach_flow_noise": ("sft_reach_flow_fewshot", "rl_reach_flow_noise", None),
    "compose_grpo_flow": ("sft_compose_flow_fewshot", "rl_compose_grpo_flow", 1200),
    "compose_grpo_ar": ("sft_compose_ar_fewshot", "rl_compose_grpo_ar", 1200),
    "mt10_grpo_flow": ("sft_mt10_flow_fewshot", "rl_mt10_grpo_flow", 500),
    "mt10_grpo_ar": ("sft_mt10_ar_fewshot", "rl_mt10_grpo_ar", 500),
    "mt10_goal_grpo_flow": ("sft_mt10_goal_flow_fewshot", "rl_mt10_goal_grpo_flow", 500),
    "mt10_goal_grpo_ar": ("sft_mt10_goal_ar_fewshot", "rl_mt10_goal_grpo_ar", 500),
}
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def mean_ci(xs: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval); the half-width is nan for one value."""
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, float("nan")
    return m, T_975.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / len(xs) ** 0.5


def run_seed(recipes: list[str], seed: int, out: Path, demos: int, noise: float, sft_steps: int | None,
             rl_steps: int | None, rl_overrides: list[str] = (), stage: str = "all", rl_minutes: float = 0.0,
             held_out: str | None = None, balanced: bool = False) -> dict[str, dict]:
    """Collect, SFT and RL for one seed; {recipe: {"sft", "rl", "curve", "minutes"}} (with
    "per_task" for a multi-task recipe, "held_out" with held_out); {} for stage "sft". balanced:
    as many demos of each task (MetaWorld benchmarks), in folders of their own ("_balanced")."""
    results, sft_dirs = {}, {}
    for name in recipes:
        sft_name, rl_name, recipe_demos = RECIPES[name]
        if sft_name not in sft_dirs:
            sft = load_sft_config(CONFIGS / "sft" / f"{sft_name}.yaml", [f"seed={seed}", "eval_every=0"])
            tag = "_balanced" if balanced else ""
            data = out / f"data_{sft.task.replace(':', '_')}_{'_'.join(sft.cameras)}{tag}_s{seed}"
            if not (data / "meta" / "info.json").is_file() and stage != "rl":
                collect_demos(sft.task, recipe_demos or demos, data, seed=100_000 * (seed + 1), obs_mode="rgb",
                              image_size=sft.image_size, cameras=sft.cameras, noise=noise, balanced=balanced)
            sft.dataset, sft.run_dir = str(data), str(out / f"{sft_name}{tag}_s{seed}")
            sft.steps = sft_steps or sft.steps
            final = Path(sft.run_dir) / "final"
            if (final / "config.json").is_file():  # an earlier run's SFT of this seed: reuse it
                sft_dirs[sft_name] = str(final)
            elif stage == "rl":
                sys.exit(f"--stage rl: no SFT checkpoint at {final}; run --stage sft with the same --out first")
            else:
                dataset = LeRobotDataset(sft.dataset, chunk_size=sft.chunk_size, cameras=sft.cameras)
                torch.manual_seed(seed)
                sft_dirs[sft_name] = train_sft(build_policy(sft, dataset.stats), dataset, sft, None,
                                               log=lambda _: None)["final"]
        if stage == "sft":
            print(f"seed {seed} {name}: SFT checkpoint {sft_dirs[sft_name]}", flush=True)
            continue
        run_dir = out / f"{name}_s{seed}"
        overrides = [f"policy.init_from={sft_dirs[sft_name]}", f"train.run_dir={run_dir}",
                     f"train.seed={seed}", "train.progress=false", "train.video_episodes=0"]
        if rl_steps:
            overrides.append(f"train.total_steps={rl_steps}")
        overrides += list(rl_overrides)
        t0 = time.time()
        config = CONFIGS / "rl" / f"{rl_name}.yaml"
        if rl_minutes:
            summary = train_for(config, overrides, rl_minutes, run_dir)
        else:
            summary = train(load_config(config, overrides))
        results[name] = {"sft": summary["success_before"], "rl": summary["eval_curve"][-1][1],
                         "curve": summary["eval_curve"], "minutes": (time.time() - t0) / 60,
                         "env_steps": summary.get("env_steps")}
        if "eval_per_task" in summary:
            results[name]["per_task"] = summary["eval_per_task"]
        if held_out:
            cfg = load_config(config, overrides)
            results[name]["held_out"] = {"task": held_out, "sft": success_on(sft_dirs[sft_name], cfg, held_out),
                                         "rl": success_on(summary.get("policy") or
                                                          str(Path(summary["checkpoint"]) / "policy"), cfg, held_out)}
        print(f"seed {seed} {name}: {results[name]['sft']:.2f} -> {results[name]['rl']:.2f} "
              f"({results[name]['minutes']:.1f} min)" + (f"; {held_out} {results[name]['held_out']['sft']:.2f} -> "
                                                         f"{results[name]['held_out']['rl']:.2f}" if held_out else ""),
              flush=True)
    return results


def train_for(config: Path, overrides: list[str], minutes: float, run_dir: Path) -> dict:
    """`embodied train CONFIG overrides` in a child process, sent SIGINT after `minutes` (it ends
    at its next iteration with a checkpoint); the summary of its newest checkpoint, with the
    path of that checkpoint's policy."""
    from embodied.run.checkpoint import load_checkpoint

    child = subprocess.Popen([sys.executable, "-m", "embodied.cli", "train", str(config), *overrides], cwd=ROOT)
    try:
        child.wait(timeout=minutes * 60)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGINT)
        child.wait()
    if child.returncode not in (0, 130):
        sys.exit(f"train {config} exited {child.returncode}")
    ckpt, meta, _ = load_checkpoint(run_dir / "checkpoints")
    return {**meta["summary"], "env_steps": meta["env_steps"], "policy": str(ckpt / "policy")}


def success_on(policy_dir: str, cfg, task: str, episodes: int = 0) -> float:
    """Success of the policy in policy_dir on `task`, with the RL config's observations, on the
    RL config's number of evaluation episodes (fixed seeds, deterministic policy)."""
    from embodied.eval.evaluate import evaluate
    from embodied.run.env import eval_seeds
    from embodied.run.device import resolve_device
    from policies.base import Policy
    from sims.registry import make_env

    e = cfg.env
    env = make_env(task, min(e.num_envs, 48), obs_mode=e.obs_mode, image_size=e.image_size, cameras=e.cameras,
                   num_threads=e.num_threads)
    try:
        policy = Policy.from_pretrained(policy_dir).to(resolve_device(cfg.train.device))
        return evaluate(policy, env, eval_seeds(episodes or cfg.train.eval_episodes)).success_rate
    finally:
        env.close()


def plot(per_recipe: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(per_recipe), figsize=(4 * len(per_recipe), 3.2), dpi=110, squeeze=False)
    for ax, (name, runs) in zip(axes[0], per_recipe.items()):
        for i, r in enumerate(runs):
            steps, rates = zip(*r["curve"])
            ax.plot(steps, rates, alpha=0.4, marker=".", label=f"seed {r['seed']}" if i < 5 else None)
        n = min(len(r["curve"]) for r in runs)  # the mean over the evaluations all seeds share
        steps = [runs[0]["curve"][k][0] for k in range(n)]
        ax.plot(steps, [statistics.mean(r["curve"][k][1] for r in runs) for k in range(n)], color="k", lw=2,
                label="mean")
        ax.set(title=name, xlabel="RL env steps", ylabel="success", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def summarize(per_recipe: dict[str, list[dict]], meta: dict, out: Path) -> None:
    """Print and write the per-recipe table (results.json) and the curves (success_curves.png).
    `late` is the mean of a run's last three evaluations: one evaluation on 50-100 seeds has a
    standard error of 4-7 points, so the final one alone over- or under-states a run."""
    table = {}
    for name, runs in per_recipe.items():
        for r in runs:
            r["late"] = statistics.mean(rate for _, rate in r["curve"][-3:])
        (sft_m, sft_ci), (rl_m, rl_ci) = mean_ci([r["sft"] for r in runs]), mean_ci([r["rl"] for r in runs])
        lift_m, lift_ci = mean_ci([r["rl"] - r["sft"] for r in runs])
        late_m, late_ci = mean_ci([r["late"] - r["sft"] for r in runs])
        table[name] = {"sft_mean": sft_m, "sft_ci95": sft_ci, "rl_mean": rl_m, "rl_ci95": rl_ci,
                       "lift_mean": lift_m, "lift_ci95": lift_ci, "late_lift_mean": late_m,
                       "late_lift_ci95": late_ci, "runs": runs}
        print(f"{name:18s} SFT {sft_m:.2f} +- {sft_ci:.2f}   RL {rl_m:.2f} +- {rl_ci:.2f}   "
              f"lift {lift_m:+.2f} +- {lift_ci:.2f}   last-three lift {late_m:+.2f} +- {late_ci:.2f}   "
              f"({len(runs)} seeds)")
        if all("per_task" in r for r in runs):  # each task: start -> mean of its last three evaluations
            table[name]["per_task"] = per_task = {}
            for task in sorted({t for r in runs for _, p in r["per_task"] for t in p}):
                starts = [r["per_task"][0][1].get(task) for r in runs]
                lates = [statistics.mean(p[task] for _, p in r["per_task"][-3:] if task in p) for r in runs
                         if any(task in p for _, p in r["per_task"][-3:])]
                starts = [x for x in starts if x is not None]
                if starts and lates:
                    per_task[task] = {"sft_mean": statistics.mean(starts), "late_mean": statistics.mean(lates)}
            print("    per task, SFT -> last three (seed means): " + ", ".join(
                f"{t} {v['sft_mean']:.2f} -> {v['late_mean']:.2f}" for t, v in per_task.items()))
        if all("held_out" in r for r in runs):
            (hs, hs_ci), (hr, hr_ci) = (mean_ci([r["held_out"]["sft"] for r in runs]),
                                        mean_ci([r["held_out"]["rl"] for r in runs]))
            hl, hl_ci = mean_ci([r["held_out"]["rl"] - r["held_out"]["sft"] for r in runs])
            table[name]["held_out"] = {"task": runs[0]["held_out"]["task"], "sft_mean": hs, "sft_ci95": hs_ci,
                                       "rl_mean": hr, "rl_ci95": hr_ci, "lift_mean": hl, "lift_ci95": hl_ci}
            print(f"    {runs[0]['held_out']['task']}: SFT {hs:.2f} +- {hs_ci:.2f}   RL {hr:.2f} +- {hr_ci:.2f}   "
                  f"lift {hl:+.2f} +- {hl_ci:.2f}")
    plot(per_recipe, out / "success_curves.png")
    (out / "results.json").write_text(json.dumps({"meta": meta, "recipes": table}, indent=1))
    print(f"wrote {out / 'results.json'} and {out / 'success_curves.png'}")


def merge(dirs: list[str], out: Path) -> None:
    """One table and one figure from the results.json of several runs of this script; a run of
    a recipe and seed found in several folders is taken from the last of them."""
    per_recipe: dict[str, dict[int, dict]] = {}
    metas = []
    for d in dirs:
        path = Path(d) / "results.json"
        if not path.is_file():
            sys.exit(f"--merge: {path} does not exist; give output folders of earlier runs of this script")
        data = json.loads(path.read_text())
        metas.append(data["meta"])
        for name, row in data["recipes"].items():
            per_recipe.setdefault(name, {}).update({r["seed"]: r for r in row["runs"]})
    summarize({name: [runs[k] for k in sorted(runs)] for name, runs in per_recipe.items()},
              {"merged_from": metas}, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", default="flow_noise,flow_sde,grpo_flow,ppo_ar,grpo_ar",
                    help=f"comma-separated, from {', '.join(RECIPES)}")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--demos", type=int, default=100, help="expert episodes per seed where the recipe names none")
    ap.add_argument("--noise", type=float, default=0.3, help="DART noise of the demos")
    ap.add_argument("--balanced", action="store_true", help="as many demos of each task (MetaWorld's MT10, MT50)")
    ap.add_argument("--sft-steps", type=int, default=0, help="0: the SFT config's steps")
    ap.add_argument("--rl-steps", type=int, default=0, help="0: the RL config's total_steps")
    ap.add_argument("--set", nargs="*", default=[], help="overrides for every RL config, e.g. env.num_envs=16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stage", choices=("all", "sft", "rl"), default="all",
                    help="sft: demos and SFT only; rl: RL from the SFT checkpoints already in --out")
    ap.add_argument("--rl-minutes", type=float, default=0.0,
                    help="> 0: each RL run in a child process, stopped by SIGINT after this many minutes")
    ap.add_argument("--held-out", default=None, help="also evaluate the SFT and final policies on this task")
    ap.add_argument("--out", default="runs/bench_recipes")
    ap.add_argument("--merge", default="", help="comma-separated output folders of earlier runs: "
                    "only combine their results.json into --out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        return merge(args.merge.split(","), out)
    recipes = args.recipes.split(",")
    bad = [r for r in recipes if r not in RECIPES]
    if bad:
        sys.exit(f"--recipes: unknown recipe {bad[0]!r}; choose from {', '.join(RECIPES)}")
    torch.set_num_threads(args.threads)
    per_recipe: dict[str, list[dict]] = {r: [] for r in recipes}
    for seed in map(int, args.seeds.split(",")):
        for name, r in run_seed(recipes, seed, out, args.demos, args.noise, args.sft_steps or None,
                                args.rl_steps or None, args.set, args.stage, args.rl_minutes, args.held_out,
                                args.balanced).items():
            per_recipe[name].append({"seed": seed, **r})
    if args.stage == "sft":
        return
    meta = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "threads": args.threads,
            "demos": {r: RECIPES[r][2] or args.demos for r in recipes}, "balanced": args.balanced,
            "noise": args.noise,
            "sft_steps": args.sft_steps, "rl_steps": args.rl_steps, "rl_minutes": args.rl_minutes,
            "rl_overrides": args.set, "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "cpus": os.cpu_count()}
    summarize(per_recipe, meta, out)


if __name__ == "__main__":
    main()
