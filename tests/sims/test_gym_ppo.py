"""PPO learns gymnasium's Reacher-v5 behind our contract (gym:Reacher-v5, docs/gym.md), and the
trained checkpoint goes through `embodied eval` and `embodied sim2real` like any task's.

PPO on the privileged observation (the target and the fingertip's offset to it are there), 16
envs, 9600 env steps (configs/ppo/ppo_gym_reacher.yaml's settings, shorter). Measured over
train.seed 0-4 (2026-11-28, this 2-core machine, commit 8777445 + this test's settings), on the
32 evaluation seeds: success (the fingertip within 2 cm of the target at some step) 0/32 before
training for every seed, after it 3, 7, 10, 1, 8 of 32; the deterministic return of the initial
policy -12.0, -12.0, -11.5, -11.7, -11.9, after training -9.9, -11.6, -9.1, -10.2, -10.9 (a
gain of 2.0, 0.4, 2.5, 1.5, 1.0; holding still scores -11.9). The test asks for a success
where there was none and a gain of at least 0.2 (half the lowest seed's).
"""

from __future__ import annotations

import json

import torch

from embodied.config import load_config
from embodied.rl.train import train

STEPS = 9600
SETTINGS = ["env.task=gym:Reacher-v5", "env.num_envs=16", "policy.name=mlp", "policy.obs_key=privileged",
            "policy.hidden_sizes=[64,64]", "policy.init_log_std=-1.0", "ppo.rollout_steps=50", "ppo.epochs=5",
            "ppo.minibatches=4", "ppo.lr=1e-3", "ppo.normalize_rewards=true", f"train.total_steps={STEPS}",
            "train.eval_every=0", "train.eval_episodes=32", "train.video_episodes=0", "train.progress=false",
            "train.torch_threads=1", "train.seed=0"]


def _return_before(cfg) -> float:
    """The deterministic return of the policy training starts from (train.py seeds torch, then builds it)."""
    from embodied.eval.evaluate import eval_seeds, evaluate
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
    assert report["episode_return"] >= before + 0.2, (before, report["episode_return"])
    path = sim2real([str(tmp_path / "run")], "gym:Reacher-v5", tmp_path / "s2r", trials=8, num_envs=8, videos=False,
                    log=lambda s: None)
    res = json.loads((tmp_path / "s2r" / "results.json").read_text())
    assert path.is_file() and len(res["episodes"]) == 8 and {e["condition"] for e in res["episodes"]} == {"nominal"}
    assert res["protocol"]["simulator_versions"]["gymnasium"].startswith("1.")
