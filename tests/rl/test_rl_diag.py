"""The update's diagnostics (embodied/rl/diagnostics.py) equal hand-computed values on tiny batches,
and every run logs them: TensorBoard train/... (per task in a multi-task batch) and one console line."""

from __future__ import annotations

import math

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from embodied.config import PPOConfig, load_config
from embodied.rl import diagnostics as diag
from embodied.rl.algorithms import ppo_policy_loss
from embodied.rl.learner import PPOLearner
from embodied.rl.rollout import RolloutCollector
from embodied.rl.train import train
from policies.registry import build_policy
from sims.registry import make_env


def test_ratio_statistics_by_hand():
    lp = torch.log(torch.tensor([[1.0, 1.5], [0.7, 2.0]]))
    old = torch.zeros(2, 2)
    mask = torch.tensor([[True, True], [True, False]])  # the 2.0 is masked out
    _, st = ppo_policy_loss(lp, old, torch.ones(2, 2), clip_low=0.2, clip_high=0.28, mask=mask)
    assert st.ratio_max.item() == pytest.approx(1.5)
    assert st.ratio_abs_dev.item() == pytest.approx((0.0 + 0.5 + 0.3) / 3)
    assert st.clip_fraction.item() == pytest.approx(2 / 3)  # 1.5 > 1.28 and 0.7 < 0.8
    assert st.ratio_mean.item() == pytest.approx((1.0 + 1.5 + 0.7) / 3)


def test_group_signal_by_hand():
    # 3 groups of 2: task a's groups (0: one success, 1: none), task b's group 2 (both succeed)
    success = torch.tensor([True, False, False, False, True, True])
    adv = torch.tensor([0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    gids = torch.tensor([0, 0, 1, 1, 2, 2])
    out = diag.group_signal(success, adv, gids, ["a", "a", "a", "a", "b", "b"])
    assert out["groups_any_success"] == pytest.approx(2 / 3)
    assert out["groups_mixed"] == pytest.approx(1 / 3)
    assert out["adv_std"] == pytest.approx(torch.tensor([0.5, -0.5, 0, 0, 0, 0]).std().item())
    assert out["adv_zero_frac"] == pytest.approx(4 / 6)
    assert out["groups_any_success/a"] == 0.5 and out["groups_any_success/b"] == 1.0
    assert out["groups_mixed/a"] == 0.5 and out["groups_mixed/b"] == 0.0
    assert out["adv_std/a"] == pytest.approx(torch.tensor([0.5, -0.5, 0, 0]).std().item())
    assert out["adv_zero_frac/b"] == 1.0 and out["adv_std/b"] == 0.0
    # one task: no per-task keys
    assert not any("/" in k for k in diag.group_signal(success, adv, gids, ["a"] * 6))


def test_rollout_signal_by_hand():
    # T=2 steps, B=3 envs (tasks x, x, y); env 1 succeeds at step 1
    success = torch.tensor([[False, False, False], [False, True, False]])
    adv = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    out = diag.rollout_signal(success, adv, mask, ["x", "x", "y"])
    assert out["groups_any_success"] == pytest.approx(1 / 3)
    assert out["groups_any_success/x"] == 0.5 and out["groups_any_success/y"] == 0.0
    counted = torch.tensor([1.0, 0.0, 2.0, 3.0, 0.0])
    assert out["adv_std"] == pytest.approx(counted.std().item())
    assert out["adv_zero_frac"] == pytest.approx(2 / 5)
    assert out["adv_std/x"] == pytest.approx(torch.tensor([1.0, 0.0, 3.0, 0.0]).std().item())
    assert out["adv_zero_frac/y"] == 0.0 and out["adv_std/y"] == 0.0  # one counted sample


def test_noise_std_of_a_flow_policy_is_its_transitions_std():
    # 2 samples: 3 and 1 stochastic steps of a chunk K=2, A=2, every transition's std 0.35 / 0.2
    ent_el = lambda s: 0.5 * (1 + math.log(2 * math.pi)) + math.log(s)  # noqa: E731
    stochastic = torch.tensor([[True, True, True, False], [True, False, False, False]])
    parts = torch.zeros(2, 2, 2)
    entropy = torch.tensor([12 * ent_el(0.35), 4 * ent_el(0.35)])
    elements = diag.elements_per_sample({"stochastic": stochastic}, parts)
    assert elements.tolist() == [12.0, 4.0]
    out = diag.noise_stats(entropy, elements, gaussian=True)
    assert out["noise_std"].item() == pytest.approx(0.35, rel=1e-5)
    mixed = diag.noise_stats(torch.tensor([12 * ent_el(0.35), 4 * ent_el(0.2)]), elements, gaussian=True)
    assert mixed["noise_std"].item() == pytest.approx(math.sqrt(0.35 * 0.2), rel=1e-5)  # geometric mean
    assert "noise_std" not in diag.noise_stats(entropy, elements, gaussian=False)


def test_learner_ratio_and_reference_kl_per_task_by_hand():
    """lr 0: the update leaves the policy as it is, so the ratio of every minibatch is
    exp(new - old) with old shifted by hand: +0.1 on Reach's rows, +0.3 on ReachColor's."""
    torch.manual_seed(0)
    env = make_env("multi:Reach+ReachColor", 4, max_episode_steps=10)
    cfg = load_config(None, ["policy.hidden_sizes=[16,16]"])
    policy = build_policy(cfg.policy, env.spec)
    col = RolloutCollector(env, policy, 6)
    col.reset(seed=0)
    traj = col.collect()
    env.close()
    assert traj.tasks == ["Reach", "Reach", "ReachColor", "ReachColor"]
    shift = torch.tensor([0.1, 0.1, 0.3, 0.3])
    traj.log_probs = traj.log_probs + shift  # the "behaviour" policy is the reference + shift
    learner = PPOLearner(policy, PPOConfig(epochs=1, minibatches=2, lr=0.0, critic_lr=0.0, lr_schedule="constant"))
    assert learner.reference is not None  # ppo.track_ref_kl keeps it without a penalty
    stats = learner.update(traj)
    k3 = lambda d: math.expm1(-d) + d  # noqa: E731  KL estimate with log(ref) - log(behaviour) = -d
    assert stats["kl_ref_rollout/Reach"] == pytest.approx(k3(0.1), rel=1e-3)
    assert stats["kl_ref_rollout/ReachColor"] == pytest.approx(k3(0.3), rel=1e-3)
    assert stats["kl_ref_rollout"] == pytest.approx((k3(0.1) + k3(0.3)) / 2, rel=1e-3)
    r1, r3 = math.exp(-0.1), math.exp(-0.3)
    assert stats["clip_fraction/Reach"] == 0.0 and stats["clip_fraction/ReachColor"] == 1.0  # 0.74 < 0.8
    assert stats["ratio_abs_dev/Reach"] == pytest.approx(1 - r1, rel=1e-3)
    assert stats["ratio_abs_dev/ReachColor"] == pytest.approx(1 - r3, rel=1e-3)
    assert stats["approx_kl/ReachColor"] == pytest.approx(r3 - 1 + 0.3, rel=1e-3)
    assert stats["ratio_max"] == pytest.approx(r1, rel=1e-4)
    assert "ref_kl" not in stats  # no penalty, no penalty term
    off = PPOLearner(policy, PPOConfig(track_ref_kl=False))
    assert off.reference is None


def test_every_run_logs_the_diagnostics(tmp_path, capsys):
    cfg = load_config(None, ["env.task=multi:Reach+ReachColor", "env.num_envs=4", "train.algorithm=grpo",
                             "grpo.group_size=2", "grpo.reward=return", "grpo.filter_groups=false",
                             "env.reward_mode=dense", "env.max_episode_steps=10", "ppo.minibatches=1",
                             "ppo.epochs=1", "policy.hidden_sizes=[16,16]", "train.total_steps=80",
                             "train.eval_every=1", "train.eval_episodes=4", "train.video_episodes=0",
                             "train.progress=false", "train.torch_threads=1", f"train.run_dir={tmp_path / 'run'}"])
    train(cfg)
    tags = EventAccumulator(str(tmp_path / "run" / "tb")).Reload().Tags()["scalars"]
    for t in ("groups_any_success", "groups_mixed", "adv_std", "adv_zero_frac", "clip_fraction", "ratio_max",
              "ratio_abs_dev", "kl_ref_rollout", "groups_any_success/Reach", "adv_std/ReachColor",
              "clip_fraction/Reach", "kl_ref_rollout/ReachColor"):
        assert f"train/{t}" in tags, t
    out = capsys.readouterr().out
    assert "iter 1 diag: any-success" in out and "kl ref" in out and "  Reach: groups_any_success=" in out
