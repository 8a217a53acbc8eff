"""The world model's data: DART demos record the executed action beside the clean label, and a
trained policy's rollouts are recorded as a dataset (`embodied collect --policy`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.data.collect import collect_demos
from embodied.data.dataset import EpisodeWriter, read_episodes, read_meta
from sims.registry import expert_for, make_env
from sims.vecenv import EnvError
from embodied.world_model.windows import load_episodes

ROOT = Path(__file__).resolve().parents[2]


def test_dart_demos_record_the_executed_action(tmp_path):
    """Under DART noise, `action` is the expert's clean label and `executed_action` is what the env
    ran: replaying the executed actions from the episode's seed gives the recorded states again,
    and the world model's episodes hold the executed actions."""
    collect_demos("Reach", 3, tmp_path / "d", seed=7, noise=0.3, num_envs=3)
    assert read_meta(tmp_path / "d")["features"]["complementary_info.executed_action"]["shape"] == [4]
    expert = expert_for("Reach")
    env = make_env("Reach", 1)
    for ep in read_episodes(tmp_path / "d"):
        np.testing.assert_allclose(ep["action"].numpy(), expert(ep["obs.privileged"].numpy()), atol=1e-5)
        off = (ep["executed_action"] - ep["action"]).abs()
        assert off.mean() > 0.1 and ep["executed_action"].abs().max() <= 1.0
        obs, _ = env.reset(seed=ep["seed"])
        for t in range(len(ep["action"]) - 1):
            torch.testing.assert_close(obs["privileged"][0], ep["obs.privileged"][t], rtol=0, atol=1e-6)
            obs = env.step(ep["executed_action"][t:t + 1]).obs
    env.close()
    episodes, _ = load_episodes(tmp_path / "d", "Reach")
    for e, ep in zip(episodes, read_episodes(tmp_path / "d"), strict=True):  # both in episode order
        torch.testing.assert_close(e.a, ep["executed_action"])


def test_noisy_dataset_without_executed_action_is_refused(tmp_path):
    spec = {"control_hz": 20.0, "max_episode_steps": 50, "expert_noise_std": 0.3}
    w = EpisodeWriter(tmp_path / "old", "Reach", spec)
    L = 5
    w.add({"obs.privileged": torch.zeros(L, 12), "action": torch.zeros(L, 4), "reward": torch.zeros(L),
           "success": torch.zeros(L, dtype=torch.bool)}, "reach", 0)
    with pytest.raises(EnvError) as e:
        load_episodes(tmp_path / "old", "Reach")
    assert "executed_action" in str(e.value) and "\n" not in str(e.value)


def _fresh_checkpoint(root):
    """A checkpoint of `embodied train`'s layout holding an untrained Reach MLP."""
    from embodied.run.checkpoint import save_checkpoint
    from embodied.config import load_config, to_dict
    from policies.registry import build_mlp

    cfg = load_config(ROOT / "configs" / "ppo" / "ppo_reach.yaml", [f"train.run_dir={root}"])
    env = make_env("Reach", 1)
    torch.manual_seed(0)
    policy = build_mlp(cfg.policy, env.spec)
    env.close()
    return save_checkpoint(root / "checkpoints", "iter_000000", policy, {},
                           {"config": to_dict(cfg), "iteration": 0, "env_steps": 0, "summary": {}})


def test_collect_policy_rollouts(tmp_path):
    """`embodied collect Reach --policy RUN` writes every episode the policy plays (failures
    too), with executed actions clipped to the bounds, the same dataset for the same seed, and
    the world model reads it."""
    from embodied.cli import main

    run = tmp_path / "run"
    _fresh_checkpoint(run)
    for name in ("a", "b"):
        assert main(["collect", "Reach", "--episodes", "4", "--out", str(tmp_path / name), "--policy", str(run),
                     "--num-envs", "4", "--seed", "3"]) == 0
    meta = read_meta(tmp_path / "a")
    assert meta["total_episodes"] == 4
    assert meta["embodied"]["spec"]["recorded_policy"] == {"checkpoint": "iter_000000", "run": "run",
                                                           "deterministic": False}
    a, b = list(read_episodes(tmp_path / "a")), list(read_episodes(tmp_path / "b"))
    assert not all(bool(e["success"].any()) for e in a)  # an untrained policy: failures are recorded
    for ea, eb in zip(a, b):
        torch.testing.assert_close(ea["action"], eb["action"])
        torch.testing.assert_close(ea["executed_action"], ea["action"].clamp(-1, 1))
    assert any((e["action"].abs() > 1).any() for e in a)  # sampled actions leave the bounds
    episodes, _ = load_episodes(tmp_path / "a", "Reach")
    assert len(episodes) == 4 and all(e.a.abs().max() <= 1 for e in episodes)
    assert main(["collect", "Reach", "--episodes", "1", "--out", str(tmp_path / "c"), "--policy", str(run),
                 "--noise", "0.1"]) == 2


def test_several_datasets_comma_separated(tmp_path):
    """dataset=A,B trains on both (expert demos and policy rollouts): their episodes in order."""
    collect_demos("Reach", 2, tmp_path / "a", seed=1, num_envs=2)
    collect_demos("Reach", 3, tmp_path / "b", seed=9, num_envs=3)
    a, _ = load_episodes(tmp_path / "a", "Reach")
    b, _ = load_episodes(str(tmp_path / "b"), "Reach")
    both, spec = load_episodes(f"{tmp_path / 'a'},{tmp_path / 'b'}", "Reach")
    assert len(both) == 5 and spec["max_episode_steps"] > 0
    for e, f in zip(both, a + b, strict=True):
        assert torch.equal(e.x, f.x) and torch.equal(e.a, f.a)
