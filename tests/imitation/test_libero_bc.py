"""The SFT -> RL path that LIBERO's state policies take (docs/libero.md, "RL on LIBERO"):
behaviour cloning of the MLP Gaussian policy (embodied/imitation/bc.py) on an `embodied collect`
dataset, PPO's policy built from it (policy.name=mlp policy.init_from=DIR), and the
"@sampled" task suffix the demonstrations are collected with. No LIBERO worker starts here: the
dataset is a MuJoCo task's (the BC code reads any dataset), the suffix is parsed only."""

from __future__ import annotations

import pytest
import torch

from embodied.imitation.bc import behaviour_clone, load_pairs, main as bc_main
from embodied.data.collect import collect_demos
from embodied.config import PolicyConfig
from policies.base import PolicyLoadError
from policies.registry import build_policy
from sims.libero.tasks import parse_name, split_layouts
from sims.vecenv import EnvError, EnvSpec


def test_layouts_suffix():
    assert split_layouts("libero:libero_spatial/0@sampled") == ("libero:libero_spatial/0", "sampled")
    assert split_layouts("libero:libero_spatial") == ("libero:libero_spatial", None)
    assert parse_name("libero:libero_spatial/3@sampled") == ("libero_spatial", "3")
    assert parse_name("libero:libero_goal@official") == ("libero_goal", None)
    with pytest.raises(EnvError, match=r"unknown layouts 'random' .* allowed after '@': official, sampled"):
        parse_name("libero:libero_spatial/0@random")


def test_bc_on_collected_demos_then_ppo_policy_starts_from_it(tmp_path):
    torch.set_num_threads(1)
    data = tmp_path / "demos"
    collect_demos("Reach", 4, data, seed=0, num_envs=4)
    obs, actions, episodes = load_pairs(data, "privileged")
    assert episodes == 4 and obs.ndim == 2 and actions.shape == (len(obs), 4)
    first2 = load_pairs(data, "privileged", episodes=2)
    assert first2[2] == 2 and torch.equal(first2[0], obs[:len(first2[0])]) and len(first2[0]) < len(obs)
    policy, fit = behaviour_clone(obs, actions, steps=400, lr=3e-3, log_std=-1.0)
    base = float(((actions - actions.mean(0)) ** 2).mean())
    assert fit["action_mse"] < 0.2 * base, (fit, base)  # the mean tracks the expert's labels
    assert torch.allclose(policy.log_std, torch.full_like(policy.log_std, -1.0))
    assert torch.allclose(policy.normalizer.mean, obs.mean(0)) and int(policy.normalizer.count) == len(obs)

    # --norm-count 1e12: PPO's running updates leave the normaliser at the demos' statistics
    held, _ = behaviour_clone(obs, actions, steps=1, norm_count=1e12)
    mean = held.normalizer.mean.clone()
    held.update_normalizer({"privileged": obs + 1.0})
    assert (held.normalizer.mean - mean).abs().max() < 1e-6
    with pytest.raises(ValueError, match=r"^norm_count: 0.5 must be >= 1"):
        behaviour_clone(obs, actions, steps=1, norm_count=0.5)

    out = tmp_path / "bc"
    bc_main([str(data), "--out", str(out), "--steps", "50", "--log-std", "-1"])
    spec = EnvSpec(task="Reach", num_envs=2, action_dim=4, state_dim=9, privileged_dim=obs.shape[1],
                   max_episode_steps=50, control_hz=20.0)
    loaded = build_policy(PolicyConfig(name="mlp", obs_key="privileged", init_from=str(out)), spec)
    saved = type(loaded).from_pretrained(out)
    x = {"privileged": obs[:8]}
    assert torch.equal(loaded.act(x, deterministic=True).actions, saved.act(x, deterministic=True).actions)
    with pytest.raises(PolicyLoadError, match=r"^policy.init_from: .* reads privileged \[\d+\] and acts \[4\]; "
                                              r"the env gives state \[9\] and takes \[4\]$"):
        build_policy(PolicyConfig(name="mlp", obs_key="state", init_from=str(out)), spec)
    with pytest.raises(SystemExit, match=r"^embodied.imitation.bc: "):
        bc_main([str(tmp_path / "empty"), "--out", str(tmp_path / "x")])
