"""Dyna-style rounds for transfer (issue 22): the policy trains inside the world model, its own
rollouts in the simulator join the model's data, the model continues training on the larger
data, and the policy continues in the new model.

One round:
1. PPO (the start checkpoint's recipe) for --steps-per-round env steps inside the current model;
2. the policy plays the 128 evaluation starts (seeds 1_000_000 + i) in the simulator and in the
   model, deterministically, as in bench_world_model.py transfer;
3. --episodes sampled rollouts of the policy in the simulator (seeds 2_000_000 + 1000 r + i,
   disjoint from the evaluation seeds), recorded with `embodied collect --policy`'s code;
4. the model continues from its weights (`init_from`) on all its data so far plus these
   rollouts, for --finetune-epochs epochs.

  python benchmarks/bench_world_model_dyna.py --wm runs/wm --start runs/ppo/checkpoints/iter_000022 \\
      --rounds 4 --steps-per-round 32768 --episodes 64 --reward-mode task --work runs/dyna --out dyna.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import torch
from wm_episodes import load_policy, sim_starts, success_in_sim, success_in_wm


def save_as_checkpoint(policy, start: Path, out: Path) -> Path:
    """The start checkpoint's layout (meta.json, trainer state) with the current policy."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(start, out, ignore=shutil.ignore_patterns("policy"))
    policy.save_pretrained(out / "policy")
    return out


def continue_model(wm: str, data: list[str], epochs: int, minutes: float, out: Path) -> tuple[str, dict]:
    from sims.world_model.checkpoint import load_world_model, save_world_model
    from embodied.world_model.train import train_world_model

    cfg = load_world_model(wm)[0].cfg
    cfg = replace(cfg, dataset=",".join(data), init_from=wm, epochs=epochs, patience=epochs,
                  max_minutes=minutes)
    model, resets, summary = train_world_model(cfg, log=lambda *a: None)
    save_world_model(out, model, resets)
    return str(out), {k: summary[k] for k in ("epochs", "best_heldout_error", "seconds", "train_episodes")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wm", required=True, help="the state world model to start from")
    p.add_argument("--start", required=True, help="the weak checkpoint to start from")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps-per-round", type=int, default=32768)
    p.add_argument("--episodes", type=int, default=64, help="simulator rollouts added per round")
    p.add_argument("--finetune-epochs", type=int, default=3)
    p.add_argument("--finetune-minutes", type=float, default=10.0)
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--seeds", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reward-mode", default="task", choices=["dense", "sparse", "task"])
    p.add_argument("--work", required=True, help="folder for each round's policy, rollouts and model")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    from embodied.data.collect_policy import collect_policy_rollouts
    from embodied.rl.train import build_algorithm
    from embodied.run.load import config_from_checkpoint
    from embodied.run.env import eval_seeds
    from sims.world_model.checkpoint import load_world_model
    from sims.world_model.env import WorldModelVecEnv

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    start, work = Path(args.start), Path(args.work)
    task = config_from_checkpoint(start).env.task
    cfg = config_from_checkpoint(start, [f"env.num_envs={args.num_envs}", f"train.seed={args.seed}"])
    policy = load_policy(start)
    seeds = eval_seeds(args.seeds)
    starts, instr = sim_starts(task, seeds)
    wm, data = args.wm, load_world_model(args.wm)[0].cfg.dataset.split(",")
    rounds, steps, t0 = [], 0, time.time()

    def score(extra: dict) -> None:
        policy.eval()
        s = success_in_sim(policy, task, seeds)
        w, u = success_in_wm(policy, wm, starts, instr, reward_mode=args.reward_mode)
        rounds.append({"env_steps": steps, "sim": float(s.mean()), "wm": float(w.mean()),
                       "wm_uncertain": float(u.mean()), "wall_seconds": round(time.time() - t0, 1), **extra})
        print(json.dumps(rounds[-1]), flush=True)

    score({"round": 0, "wm_path": wm})
    for r in range(1, args.rounds + 1):
        env = WorldModelVecEnv(wm, args.num_envs, seed=args.seed + r, reward_mode=args.reward_mode)
        collector, learner = build_algorithm(cfg, env, policy)
        collector.reset(seed=args.seed + r)
        policy.train()
        goal = steps + args.steps_per_round
        while steps < goal:
            traj = collector.collect()
            learner.update(traj)
            policy.update_normalizer(traj.obs)
            steps += int(traj.valid.sum())
        env.close()
        score({"round": r, "wm_path": wm})
        if r == args.rounds:
            break
        ckpt = save_as_checkpoint(policy, start, work / f"round{r}" / "policy_ckpt")
        rollouts = work / f"round{r}" / "rollouts"
        shutil.rmtree(rollouts, ignore_errors=True)
        got = collect_policy_rollouts(ckpt, args.episodes, rollouts, seed=2_000_000 + 1000 * r)
        data.append(str(rollouts))
        wm, summary = continue_model(wm, data, args.finetune_epochs, args.finetune_minutes,
                                     work / f"round{r}" / "wm")
        rounds[-1].update(rollout_success=got.get("success_rate"), model=summary)
        print(json.dumps({"round": r, "rollout_success": got.get("success_rate"), "model": summary}), flush=True)
    result = {"start": f"{start.parent.parent.name}/{start.name}", "wm": args.wm, "reward_mode": args.reward_mode,
              "steps_per_round": args.steps_per_round, "episodes_per_round": args.episodes, "rounds": rounds,
              "lift_sim": rounds[-1]["sim"] - rounds[0]["sim"], "best_sim": max(x["sim"] for x in rounds)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("lift_sim", "best_sim")}))


if __name__ == "__main__":
    main()
