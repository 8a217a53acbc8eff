"""Every flow RL path runs on a loaded pi0 checkpoint, with the backbone frozen or LoRA.

A tiny synthetic LeRobot pi0 (tests/pretrained_ckpt.py) is loaded strictly, then trained for
one iteration by the toolkit's own collectors and learners: Flow-Noise and Flow-SDE with PPO,
Flow-SDE with GRPO (and Flow-Noise PPO on a pi0.5). Frozen parts stay bit-identical, trained parts move, the first ratio is
1, and a LoRA-adapted policy merges into one that saves and reloads in our format.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from embodied.config import PPOConfig, load_config
from embodied.rl.episodes import GroupCollector
from embodied.rl.learner import GRPOLearner, PPOLearner
from embodied.rl.rollout import RolloutCollector
from pretrained_ckpt import IMAGE, Pi05Reference, Pi0Reference, write_lerobot_pi0, write_lerobot_pi05, write_tokenizer
from policies.base import Policy
from policies.vla.lora import LoRALinear, apply_lora, merge_lora, trainable_summary
from policies.vla.pretrained import load_pretrained
from sims.registry import make_env

MAP = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "input_maps" /
                      "tiny_pi0__pushcube.yaml").read_text())


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("pi0rl")
    return (write_lerobot_pi0(root / "lerobot", Pi0Reference(seed=0), ["image"]), write_tokenizer(root / "tok"),
            write_lerobot_pi05(root / "pi05", Pi05Reference(seed=0), ["image"]))


@pytest.fixture
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _load(ckpt, method: str, pi05: bool = False):
    torch.manual_seed(0)
    policy = load_pretrained(ckpt[2] if pi05 else ckpt[0], MAP, ckpt[1])
    policy.config.noise_method = method
    return policy


def _snapshot(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method,pi05", [("flow_noise", False), ("flow_sde", False), ("flow_noise", True)])
def test_ppo_iteration_on_a_loaded_checkpoint_with_a_frozen_backbone(ckpt, method, pi05, one_thread):
    policy = _load(ckpt, method, pi05)
    policy.prefix.requires_grad_(False)  # policy.freeze=vlm
    counts = trainable_summary(policy)
    assert counts["trainable"] == sum(counts[k] for k in ("expert", "noise_head", "critic"))
    prefix, expert = _snapshot(policy.prefix), _snapshot(policy.expert)
    env = make_env("PushCube", 4, obs_mode="rgb", image_size=IMAGE)
    col = RolloutCollector(env, policy, 3)
    col.reset(seed=0)
    traj = col.collect()
    env.close()
    stats = PPOLearner(policy, PPOConfig(epochs=1, minibatches=2, logprob_level="action", lr=1e-4)).update(traj)
    assert abs(stats["ratio"] - 1.0) < 0.05 and stats["minibatch_updates"] == 2
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert _same(prefix, _snapshot(policy.prefix)) and not _same(expert, _snapshot(policy.expert))


def test_grpo_iteration_on_a_loaded_checkpoint(ckpt, one_thread):
    policy = _load(ckpt, "flow_sde")
    before = _snapshot(policy.expert)
    env = make_env("PushCube", 4, obs_mode="rgb", image_size=IMAGE)
    traj = GroupCollector(env, policy, group_size=2, seed=3).collect()
    env.close()
    grpo = load_config(None).grpo
    grpo.filter_groups, grpo.reward = False, "return"  # all-fail groups still rank by return
    stats = GRPOLearner(policy, PPOConfig(epochs=1, minibatches=1, lr=1e-4), grpo).update(traj)
    assert stats["kept_groups"] == 2.0 and abs(stats["ratio"] - 1.0) < 0.05
    assert not _same(before, _snapshot(policy.expert))


def test_lora_trains_adapters_only_and_merges_into_a_plain_checkpoint(ckpt, tmp_path, one_thread):
    policy = _load(ckpt, "flow_noise")
    obs = make_env("PushCube", 2, obs_mode="rgb", image_size=IMAGE).reset(seed=0)
    obs = obs[0] if isinstance(obs, tuple) else obs
    with torch.no_grad():
        before = policy.act(obs, deterministic=True).actions
    wrapped = apply_lora(policy.prefix, rank=4)
    assert wrapped == 4 * 4 + 2 * 4  # LM layers x (q, k, v, o) + SigLIP layers x (q, k, v, out)
    counts = trainable_summary(policy)
    lora = sum(p.numel() for m in policy.modules() if isinstance(m, LoRALinear) for p in (m.lora_a, m.lora_b))
    assert counts["prefix"] == lora and counts["trainable"] == lora + counts["expert"] + counts["noise_head"] + counts["critic"]
    with torch.no_grad():  # a fresh adapter (B = 0) changes nothing
        assert torch.equal(policy.act(obs, deterministic=True).actions, before)
    base = {k: v.clone() for k, v in policy.prefix.state_dict().items() if "lora_" not in k}
    env = make_env("PushCube", 4, obs_mode="rgb", image_size=IMAGE)
    col = RolloutCollector(env, policy, 2)
    col.reset(seed=0)
    PPOLearner(policy, PPOConfig(epochs=1, minibatches=1, lr=1e-3)).update(col.collect())
    env.close()
    after = policy.prefix.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in base.items())  # the backbone itself never moves
    assert any(m.lora_b.abs().sum() > 0 for m in policy.modules() if isinstance(m, LoRALinear))
    with torch.no_grad():
        adapted = policy.act(obs, deterministic=True).actions
    assert merge_lora(policy) == wrapped and not any(isinstance(m, LoRALinear) for m in policy.modules())
    policy.save_pretrained(tmp_path / "merged")
    again = Policy.from_pretrained(tmp_path / "merged")
    with torch.no_grad():
        assert (again.act(obs, deterministic=True).actions - adapted).abs().max() < 1e-5


def test_lora_rank_of_the_train_config_survives_save_and_reload(ckpt, tmp_path, one_thread):
    """policy.lora_rank wraps a loaded checkpoint's prefix; the adapters are part of the saved
    architecture, so a checkpoint reloads (and resumes) with them."""
    from embodied.config import PolicyConfig
    from policies.base import PolicyLoadError
    from policies.registry import build_policy

    _load(ckpt, "flow_noise").save_pretrained(tmp_path / "init")
    spec = make_env("PushCube", 1, obs_mode="rgb", image_size=IMAGE).spec
    policy = build_policy(PolicyConfig(name="flow_vla", init_from=str(tmp_path / "init"), lora_rank=4), spec)
    adapters = [m for m in policy.modules() if isinstance(m, LoRALinear)]
    assert policy.config.lora_rank == 4 and len(adapters) == 24
    with torch.no_grad():
        for m in adapters:  # as if trained
            m.lora_b.normal_(0.0, 0.01)
    policy.save_pretrained(tmp_path / "ckpt")
    again = Policy.from_pretrained(tmp_path / "ckpt")
    a, b = policy.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert trainable_summary(again)["trainable"] == trainable_summary(policy)["trainable"]
    with pytest.raises(PolicyLoadError, match="already holds rank-4 adapters, not 8"):
        build_policy(PolicyConfig(name="flow_vla", init_from=str(tmp_path / "ckpt"), lora_rank=8), spec)
