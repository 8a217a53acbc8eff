"""The flow VLA trained inside an image world model (issue 22): does Flow-Noise PPO inside the
model lift the VLA's success in the simulator?

The RL recipe (--config, e.g. configs/rl/rl_pushcube_flow_noise.yaml: Flow-Noise, token-level
log-probs, the privileged critic) starts from an SFT'd VLA (--sft) and trains on `wm:--wm`
only, with the model's cameras at its image size. Every --eval-every iterations, the
deterministic policy plays the same --seeds evaluation starts (seeds 1_000_000 + i) in the
simulator and in the model: in the model, from the simulator's initial privileged vectors and
camera frames (WorldModelVecEnv.reset_to). With --rounds > 1, Dyna rounds: after each round
but the last, --episodes sampled rollouts of the current policy in the simulator (seeds
2_000_000 + 1000 r + i, apart from the evaluation seeds), with the model's cameras, join the
model's data, and the model continues from its weights on all of it (bench_world_model_dyna.py).
With --prime the start policy's rollouts (seeds 2_000_000 + i) join first, before any PPO.

  python benchmarks/bench_world_model_vla.py --wm runs/wm_rgb --sft runs/sft_flow/final \\
      --config configs/rl/rl_pushcube_flow_noise.yaml --steps-per-round 51200 --eval-every 8 \\
      --reward-mode task --work runs/wm_vla --out wm_vla.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
from wm_episodes import success_in_sim, success_in_wm


def sim_starts_rgb(task: str, seeds: list[int], obs_kw: dict) -> tuple[torch.Tensor, list[str], dict]:
    """The simulator's initial privileged vectors [N, P], instructions and camera frames."""
    from sims.registry import make_env

    env = make_env(task, len(seeds), **obs_kw)
    obs, _ = env.reset(seed=seeds)
    env.close()
    images = {k: v.clone() for k, v in obs.items() if k.startswith("rgb_")}
    return obs["privileged"].clone(), list(obs["instruction"]), images


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wm", required=True, help="an image world model (trained with the recipe's cameras)")
    p.add_argument("--sft", required=True, help="the SFT'd VLA to start from (a policy folder)")
    p.add_argument("--config", default="configs/rl/rl_pushcube_flow_noise.yaml", help="the RL recipe")
    p.add_argument("--rounds", type=int, default=1, help="1: no model updates; > 1: Dyna rounds")
    p.add_argument("--steps-per-round", type=int, default=51200)
    p.add_argument("--eval-every", type=int, default=8, help="iterations between evaluations")
    p.add_argument("--episodes", type=int, default=64, help="simulator rollouts added per Dyna round")
    p.add_argument("--prime", action="store_true",
                   help="before any PPO, the start policy's rollouts join the data and the model continues")
    p.add_argument("--finetune-epochs", type=int, default=2)
    p.add_argument("--finetune-minutes", type=float, default=10.0)
    p.add_argument("--seeds", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reward-mode", default="task", choices=["dense", "sparse", "task"])
    p.add_argument("--rollout", default="mean", choices=["mean", "members"],
                   help="the model env's rollout (sims/world_model/rollout.py)")
    p.add_argument("--set", nargs="*", default=[], help="more key=value overrides of the recipe")
    p.add_argument("--work", required=True, help="folder for each round's policy, rollouts and model")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    from bench_world_model_dyna import continue_model
    from embodied.run.checkpoint import save_checkpoint
    from embodied.data.collect_policy import collect_policy_rollouts
    from embodied.config import load_config, to_dict
    from embodied.rl.train import build_algorithm
    from embodied.run.env import eval_seeds
    from policies.registry import build_policy
    from sims.world_model.checkpoint import load_world_model
    from sims.world_model.env import WorldModelVecEnv

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    cfg = load_config(args.config, [f"policy.init_from={args.sft}", f"train.seed={args.seed}", *args.set])
    task, work = cfg.env.task, Path(args.work)
    obs_kw = {"obs_mode": "rgb", "cameras": tuple(cfg.env.cameras), "image_size": cfg.env.image_size}
    seeds = eval_seeds(args.seeds)
    starts, instr, images = sim_starts_rgb(task, seeds, obs_kw)
    wm, data = args.wm, load_world_model(args.wm)[0].cfg.dataset.split(",")
    wm_kw = {**obs_kw, "reward_mode": args.reward_mode, "rollout": args.rollout}
    env = WorldModelVecEnv(wm, cfg.env.num_envs, seed=args.seed, **wm_kw)
    policy = build_policy(cfg.policy, env.spec, per_action_value=cfg.ppo.reward_level == "action")
    curve, steps, it, t0 = [], 0, 0, time.time()

    def score(extra: dict) -> None:
        policy.eval()
        ts = time.time()
        s = success_in_sim(policy, task, seeds, obs_kw=obs_kw)
        tw = time.time()
        w, u = success_in_wm(policy, wm, starts, instr, reward_mode=args.reward_mode, images=images,
                             obs_kw={**obs_kw, "rollout": args.rollout})
        policy.train()
        curve.append({"env_steps": steps, "iteration": it, "sim": float(s.mean()), "wm": float(w.mean()),
                      "wm_uncertain": float(u.mean()), "sim_eval_s": round(tw - ts, 1),
                      "wm_eval_s": round(time.time() - tw, 1), "wall_seconds": round(time.time() - t0, 1), **extra})
        print(json.dumps(curve[-1]), flush=True)

    def add_rollouts(r: int) -> None:
        """The current policy's sampled simulator rollouts join the data; the model continues on it."""
        nonlocal wm
        meta = {"config": to_dict(cfg), "iteration": it, "env_steps": steps, "summary": {}}
        ckpt = save_checkpoint(work / f"round{r}" / "checkpoints", f"iter_{it:06d}", policy, {}, meta)
        rollouts = work / f"round{r}" / "rollouts"
        shutil.rmtree(rollouts, ignore_errors=True)
        got = collect_policy_rollouts(ckpt, args.episodes, rollouts, seed=2_000_000 + 1000 * r, **obs_kw)
        data.append(str(rollouts))
        wm, summary = continue_model(wm, data, args.finetune_epochs, args.finetune_minutes, work / f"round{r}" / "wm")
        curve[-1].update(rollout_success=got.get("success_rate"), model=summary)
        print(json.dumps({"round": r, "rollout_success": got.get("success_rate"), "model": summary}), flush=True)

    for r in range(1, args.rounds + 1):
        if r > 1:
            env = WorldModelVecEnv(wm, cfg.env.num_envs, seed=args.seed + r, **wm_kw)
        collector, learner = build_algorithm(cfg, env, policy)
        collector.reset(seed=args.seed + r)
        if r == 1:
            if collector.obs is not None:
                policy.update_normalizer(collector.obs)
            score({"round": 0, "wm_path": wm})
            if args.prime:  # the start policy's own rollouts join the data before any PPO
                env.close()
                add_rollouts(0)
                score({"round": 0, "wm_path": wm})
                env = WorldModelVecEnv(wm, cfg.env.num_envs, seed=args.seed + r, **wm_kw)
                collector, learner = build_algorithm(cfg, env, policy)
                collector.reset(seed=args.seed + r)
        goal = steps + args.steps_per_round
        while steps < goal:
            tc = time.time()
            traj = collector.collect()
            stats = learner.update(traj)
            policy.update_normalizer(traj.obs)
            steps, it = steps + int(traj.valid.sum()), it + 1
            ro = collector.pop_episode_stats()
            print(json.dumps({"it": it, "env_steps": steps, "seconds": round(time.time() - tc, 1),
                              "rollout_success": ro.get("success_rate"),
                              "approx_kl": float(stats.get("approx_kl", float("nan")))}), flush=True)
            if it % args.eval_every == 0 or steps >= goal:
                score({"round": r, "wm_path": wm})
        env.close()
        if r == args.rounds:
            break
        add_rollouts(r)
    result = {"sft": args.sft, "config": args.config, "wm": args.wm, "reward_mode": args.reward_mode,
              "rollout": args.rollout,
              "rounds": args.rounds, "steps_per_round": args.steps_per_round, "seeds": args.seeds,
              "overrides": args.set, "curve": curve, "lift_sim": curve[-1]["sim"] - curve[0]["sim"],
              "best_sim": max(c["sim"] for c in curve)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("lift_sim", "best_sim")}))


if __name__ == "__main__":
    main()
