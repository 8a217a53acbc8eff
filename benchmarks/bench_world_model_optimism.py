"""Where a world model's optimism about a policy comes from (issue 22): one policy, one set of
starts, the simulator's success against the model's under several ways of scoring the model.

The deterministic policy plays the same evaluation starts (seeds 1_000_000 + i) in the
simulator and in every model given, from the simulator's initial privileged vectors (and, for
an image model, its camera frames). In each model it is scored by the task's check on the
decoded state ("task") and by the success head ("head"), with the checkpoint's disagreement
threshold multiplied by each --scales (< 1 truncates sooner; a truncated episode is a failure).
A model with member heads (member_heads: true) is scored by their mean success probability and,
in a row of its own ("aggregate": "min"), by their minimum.
If a stricter truncation brings the model's success down towards the simulator's, the ensemble
knows where the model is wrong; if it does not, the members agree on the optimistic outcome.

  python benchmarks/bench_world_model_optimism.py --policy runs/sft_flow/final \\
      --wm runs/wm_rgb runs/wm_rgb_plus_own_rollouts --scales 1,0.5,0.25 --out optimism.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from wm_episodes import success_in_sim, success_in_wm


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", required=True, help="a policy folder (save_pretrained) or a checkpoint with policy/")
    p.add_argument("--wm", nargs="+", required=True, help="world model checkpoints of the policy's task")
    p.add_argument("--scales", default="1,0.5,0.25", help="multiples of the disagreement threshold")
    p.add_argument("--seeds", type=int, default=128)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    from embodied.run.env import eval_seeds
    from policies.base import Policy
    from sims.registry import make_env
    from sims.world_model.checkpoint import load_world_model

    torch.set_num_threads(1)
    path = Path(args.policy)
    policy = Policy.from_pretrained(path / "policy" if (path / "policy").is_dir() else path)
    policy.eval()
    cfg = load_world_model(args.wm[0])[0].cfg
    obs_kw = ({"obs_mode": "rgb", "cameras": tuple(cfg.cameras), "image_size": tuple(cfg.image_size)}
              if cfg.cameras else {})
    seeds = eval_seeds(args.seeds)
    env = make_env(cfg.task, len(seeds), **obs_kw)
    obs, _ = env.reset(seed=seeds)
    env.close()
    starts, instr = obs["privileged"].clone(), list(obs["instruction"])
    images = {k: v.clone() for k, v in obs.items() if k.startswith("rgb_")} or None
    t0 = time.time()
    sim = success_in_sim(policy, cfg.task, seeds, obs_kw=obs_kw)
    rows = []
    print(json.dumps({"sim": float(sim.mean()), "seconds": round(time.time() - t0, 1)}), flush=True)
    for wm in args.wm:
        member_heads = load_world_model(wm)[0].cfg.member_heads
        scores = [("task", "task", "mean"), ("head", "sparse", "mean")]
        scores += [("head", "sparse", "min")] if member_heads else []
        for scale in (float(s) for s in args.scales.split(",")):
            for mode, reward_mode, agg in scores:
                t0 = time.time()
                w, u = success_in_wm(policy, wm, starts, instr, reward_mode=reward_mode, images=images,
                                     obs_kw={**obs_kw, "uncertainty_scale": scale, "success_aggregate": agg})
                rows.append({"wm": wm, "scale": scale, "score": mode, "aggregate": agg, "wm_success": float(w.mean()),
                             "uncertain": float(u.mean()),
                             "both_success": float((w & sim).mean()), "wm_only": float((w & ~sim).mean()),
                             "seconds": round(time.time() - t0, 1)})
                print(json.dumps(rows[-1]), flush=True)
    result = {"policy": args.policy, "task": cfg.task, "seeds": args.seeds, "sim": float(sim.mean()),
              "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
