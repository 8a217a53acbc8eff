"""PPO learns gymnasium's Reacher-v5 behind our contract (gym:Reacher-v5, docs/gym.md), and the
trained checkpoint goes through `embodied eval` and `embodied sim2real` like any task's.

PPO on the privileged observation (the target and the fingertip's offset to it are there), 16
envs, 8000 env steps (configs/ppo/ppo_gym_reacher.yaml's settings, shorter). Measured over
train.seed 0-4 (2026-11-28, this 2-core machine, commit 6239441, these settings), on the 32
evaluation seeds: success (the fingertip within 2 cm of the target at some step) 0/32 before
training for every seed, after it 3, 2, 3, 4, 4 of 32; the deterministic return of the initial
policy -12.0, -12.0, -11.5, -11.7, -11.9, after training -9.2, -10.8, -9.7, -10.1, -10.9 (a gain
of 2.75, 1.18, 1.86, 1.52, 0.95; holding still scores -11.9). The test asks for a success where
there was none (half the lowest seed's 2) and a gain of at least 0.45 (about half the lowest).
At 9600 steps the same seeds gave 3, 7, 10, 1, 8 of 32 and gains 0.4-2.5: learning this short is
noisy, which the margins allow for.
"""

from __future__ import annotations

import json

import torch

from embodied.config import load_config
from embodied.rl.train import train

STEPS = 8000
SETTINGS = ["env.task=gym:Reacher-v5", "env.num_envs=16", "policy.name=mlp", "policy.obs_key=privileged",
            "policy.hidden_sizes=[64,64]", "policy.init_log_std=-1.0", "ppo.rollout_steps=50", "ppo.epochs=5",
            "ppo.minibatches=4", "ppo.lr=1e-3", "ppo.normalize_rewards=true", f"train.total_steps={STEPS}",
            "train.eval_every=0", "train.eval_episodes=32", "train.video_episodes=0", "train.progress=false",
            "train.torch_threads=1", "train.seed=0"]


def _return_before(cfg) -> float:
    """The deterministic return of the policy training starts from (train.py seeds torch, then builds it)."""
    from embodied.run.env import eval_seeds
    from embodied.eval.evaluate import evaluate
    from policies.registry import build_policy
    from sims.registry import make_env

    with make_env(cfg.env.task, 16) as env:
        torch.manual_seed(cfg.train.seed)
        policy = build_policy(cfg.policy, env.spec).eval()
        return evaluate(policy, env, eval_seeds(32)).episode_return


def test_ppo_learns_reacher_then_eval_and_sim2real(tmp_path, capsys):
    from embodied.cli import main
    from embodied.eval.sim2real import sim2real

    cfg = load_config(None, SETTINGS + [f"train.run_dir={tmp_path / 'run'}"])
    before = _return_before(cfg)
    summary = train(cfg)
    assert summary["success_before"] == 0.0 and summary["eval_curve"][-1][1] >= 1 / 32, summary["eval_curve"]
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--episodes", "32"]) == 0  # the same 32 evaluation seeds
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "gym:Reacher-v5" and report["success_rate"] == summary["eval_curve"][-1][1]
    assert report["episode_return"] >= before + 0.45, (before, report["episode_return"])
    path = sim2real([str(tmp_path / "run")], "gym:Reacher-v5", tmp_path / "s2r", trials=8, num_envs=8, videos=False,
                    log=lambda s: None)
    res = json.loads((tmp_path / "s2r" / "results.json").read_text())
    assert path.is_file() and len(res["episodes"]) == 8 and {e["condition"] for e in res["episodes"]} == {"nominal"}
    assert res["protocol"]["simulator_versions"]["gymnasium"].startswith("1.")
