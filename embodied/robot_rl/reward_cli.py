"""`embodied reward train DATASET --out PATH`: a learned success classifier for on-robot RL
(embodied/robot_rl/reward.py, docs/robot_rl.md). The parser imports nothing heavy
(tests/test_cli_startup.py); the handler imports torch."""

from __future__ import annotations

import argparse
import json
import sys


def reward_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="reward_command", required=True)
    t = sub.add_parser("train", help="train a success classifier on recorded episodes; report AUROC, FPR, "
                                     "precision and recall on held-out episodes")
    t.add_argument("dataset", help="a LeRobot v3 dataset with success labels (a finetune run's online/)")
    t.add_argument("--out", required=True, help="the classifier file to write (.safetensors)")
    t.add_argument("--obs-key", default="privileged", help="the observation it reads: state, privileged or "
                                                           "rgb_<camera> (a small CNN)")
    t.add_argument("--fpr-target", type=float, default=0.01, help="the threshold keeps the validation "
                                                                  "false-positive rate at or below this")
    t.add_argument("--steps", type=int, default=1500)
    t.add_argument("--seed", type=int, default=0)
    t.set_defaults(fn=cmd_reward_train)


def cmd_reward_train(args: argparse.Namespace) -> int:
    import torch

    from embodied.data.layout import DatasetError
    from embodied.robot_rl.reward import RewardError, RewardTrainConfig, train_classifier

    torch.set_num_threads(1)
    if not 0.0 <= args.fpr_target < 1.0 or args.steps < 1:
        print(f"embodied reward: error: --fpr-target must be in [0, 1) and --steps >= 1, got {args.fpr_target}, "
              f"{args.steps}", file=sys.stderr)
        return 2
    cfg = RewardTrainConfig(obs_key=args.obs_key, steps=args.steps, fpr_target=args.fpr_target, seed=args.seed)
    try:
        result = train_classifier(args.dataset, args.out, cfg)
    except (DatasetError, RewardError) as e:
        print(f"embodied reward: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1))
    return 0
