"""The multi-task RL methods as settings: per-task advantage normalisation, dynamic sampling
(grpo.dynamic_sampling), demonstrations kept in the update (ppo.bc_coef): the math by hand, the
wiring on real envs, and one behaviour check of the BC term."""

from __future__ import annotations

import pytest
import torch

from embodied.config import ConfigError, GRPOConfig, PPOConfig, load_config
from embodied.data.collect import collect_demos
from embodied.rl.algorithms import task_normalized
from embodied.rl.demos import demo_sampler
from embodied.rl.episodes import DynamicSampler, GroupCollector, concat_envs
from embodied.rl.learner import GRPOLearner, PPOLearner, per_task
from embodied.rl.rollout import RolloutCollector
from embodied.rl.trajectory import Trajectory
from policies.registry import build_policy
from sims.registry import make_env


def test_task_normalized_by_hand():
    adv = torch.tensor([1.0, 3.0, 10.0, 20.0, 30.0, 7.0])
    task = torch.tensor([0, 0, 1, 1, 1, 1])
    count = torch.tensor([True, True, True, True, True, False])  # the 7 does not count
    out = task_normalized(adv, task, count)
    s0 = torch.tensor([1.0, 3.0]).std()  # unbiased
    s1 = torch.tensor([10.0, 20.0, 30.0]).std()
    exp = torch.tensor([(1 - 2) / s0, (3 - 2) / s0, (10 - 20) / s1, 0.0, (30 - 20) / s1, 7.0])
    assert torch.allclose(out, exp, atol=1e-6)
    # GRPO: already centred per group, scaled by the task's RMS around 0; an all-zero task stays 0
    g = task_normalized(torch.tensor([0.5, -0.5, 0.0, 0.0]), torch.tensor([0, 0, 1, 1]),
                        torch.ones(4, dtype=torch.bool), centre=False)
    assert torch.allclose(g, torch.tensor([1.0, -1.0, 0.0, 0.0]), atol=1e-6)
    # the learner's helper: [T, B] advantages, B env labels (time repeats each env's task)
    a = torch.tensor([[1.0, 10.0], [3.0, 30.0]])
    out = per_task(a, torch.ones(2, 2, dtype=torch.bool), ["x", "y"], centre=True)
    s = torch.tensor([1.0, 3.0]).std()
    assert torch.allclose(out, torch.tensor([[-1 / s, -1 / s], [1 / s, 1 / s]]), atol=1e-6)


def _traj(T: int, B: int, gids: list[int], tasks: list[str], fill: float) -> Trajectory:
    z = lambda *s: torch.full((T, B, *s), fill)  # noqa: E731
    b = lambda: torch.ones(T, B, dtype=torch.bool)  # noqa: E731
    return Trajectory(obs={"state": z(3)}, actions=z(1, 2), log_probs=z(), values=z(), rewards=z(1), valid=b()[..., None],
                      terminated=b(), truncated=~b(), success=~b(), bootstrap=z(), last_value=torch.full((B,), fill),
                      replay={"x": z(2)}, instructions=[["go"] * B for _ in range(T)], log_prob_parts=z(1, 2),
                      group_ids=torch.tensor(gids), episode_mask=b(), tasks=tasks)


def test_concat_envs_pads_time_and_keeps_groups_apart():
    a, b = _traj(2, 2, [0, 0], ["x", "x"], 1.0), _traj(3, 4, [0, 0, 1, 1], ["x", "x", "y", "y"], 2.0)
    c = concat_envs([a, b])
    assert c.obs["state"].shape == (3, 6, 3) and c.log_prob_parts.shape == (3, 6, 1, 2)
    assert c.group_ids.tolist() == [0, 0, 1, 1, 2, 2] and c.tasks == ["x", "x", "x", "x", "y", "y"]
    assert c.episode_mask[2].tolist() == [False, False, True, True, True, True]  # a's padding
    assert not c.valid[2, :2].any() and c.log_probs[2, :2].eq(0).all() and c.log_probs[2, 2:].eq(2).all()
    assert len(c.instructions) == 3 and c.instructions[2] == ["", "", "go", "go", "go", "go"]
    assert c.last_value.tolist() == [1, 1, 2, 2, 2, 2]


class _SucceedsFrom(GroupCollector):
    """The real collector; from its k-th collection on, the first env of every group is marked
    successful at its first step (the task's reward is not what this check is about)."""

    def __init__(self, *a, k: int, **kw):
        super().__init__(*a, **kw)
        self.k, self.calls = k, 0

    def collect(self) -> Trajectory:
        traj = super().collect()
        self.calls += 1
        if self.calls >= self.k:
            first = torch.zeros(traj.num_envs, dtype=torch.bool)
            first[::self.group_size] = True
            traj.success[0] |= first
        return traj


@pytest.fixture(scope="module")
def reach_env():
    env = make_env("multi:Reach+ReachColor", 4, max_episode_steps=5)
    yield env
    env.close()


def _mlp(env):
    torch.manual_seed(0)
    return build_policy(load_config(None, ["policy.hidden_sizes=[16,16]"]).policy, env.spec)


def test_dynamic_sampling_refills_until_the_groups_vary(reach_env):
    policy = _mlp(reach_env)
    # no group varies in the first two collections: the sampler collects until the third fills the batch
    sampler = DynamicSampler(_SucceedsFrom(reach_env, policy, 2, seed=0, k=3), max_collects=5)
    traj = sampler.collect()
    assert traj.num_envs == 12 and traj.group_ids.unique().numel() == 6
    assert traj.tasks == ["Reach", "Reach", "ReachColor", "ReachColor"] * 3
    stats = sampler.pop_episode_stats()
    assert stats["collects"] == 3 and stats["kept_share"] == pytest.approx(2 / 6) and stats["episodes"] == 12
    learner = GRPOLearner(policy, PPOConfig(epochs=1, minibatches=1), GRPOConfig(group_size=2, dynamic_sampling=True,
                                                                                filter_groups=False))
    out = learner.update(traj)
    assert out["kept_groups"] == 2 and out["samples"] == 2 * 5 * 2  # 2 groups x 2 episodes x 5 steps
    # never filled: stops at max_collects
    capped = DynamicSampler(GroupCollector(reach_env, policy, 2, seed=0), max_collects=2)
    assert capped.collect().num_envs == 8 and capped.pop_episode_stats()["collects"] == 2


def test_settings_that_do_not_fit_are_one_line_errors():
    with pytest.raises(ConfigError, match="ppo.bc_coef: 0.5; allowed: 0, or > 0 with ppo.bc_dataset"):
        load_config(None, ["ppo.bc_coef=0.5"])
    with pytest.raises(ConfigError, match="grpo.max_collects: 0"):
        load_config(None, ["train.algorithm=grpo", "grpo.max_collects=0"])
    with pytest.raises(ConfigError, match="grpo.dynamic_sampling: the single-process loop only"):
        load_config(None, ["train.algorithm=grpo", "grpo.dynamic_sampling=true", "train.backend=local"])


def test_the_bc_term_holds_the_demonstrated_actions(reach_env, tmp_path):
    """Six PPO updates on one rollout of the untrained policy, from the same start: with ppo.bc_coef
    the demonstrations' imitation loss (the policy's negative log-likelihood of the expert's
    actions) ends lower than without, by a wide margin (about 5.9 against 3.0 on the project's 2-core machine)."""
    data = tmp_path / "demos"
    collect_demos("multi:Reach+ReachColor", 4, data, seed=0, obs_mode="state", progress=False)
    base = _mlp(reach_env)
    col = RolloutCollector(reach_env, base, 5)
    col.reset(seed=0)
    traj = col.collect()
    demo_loss = {}
    for coef in (0.0, 1.0):
        policy = _mlp(reach_env)
        cfg = load_config(None, ["policy.hidden_sizes=[16,16]", f"ppo.bc_coef={coef}", f"ppo.bc_dataset={data}",
                                 "ppo.bc_batch_size=16", "ppo.epochs=4", "ppo.minibatches=2", "ppo.lr=3e-3",
                                 "ppo.lr_schedule=constant", "ppo.entropy_coef=0.0", "ppo.track_ref_kl=false"])
        learner = PPOLearner(policy, cfg.ppo)
        learner.demos = demo_sampler(cfg, policy)
        assert (learner.demos is None) == (coef == 0)
        torch.manual_seed(1)
        for _ in range(6):
            stats = learner.update(traj)
        assert ("bc_loss" in stats) == (coef > 0)
        sampler = demo_sampler(load_config(None, [f"ppo.bc_coef=1", f"ppo.bc_dataset={data}", "ppo.bc_batch_size=16"]),
                               policy)
        with torch.no_grad():
            demo_loss[coef] = float(policy.sft_loss(*sampler.sample()))
    assert demo_loss[1.0] < demo_loss[0.0] - 0.5, demo_loss
