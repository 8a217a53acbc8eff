"""Checkpoints written before the per-policy config sections still load (tests/fixtures/
checkpoints_v1/: one tiny run checkpoint of each policy, written at 2761417 by its make.py,
when `policy:` was one class holding every policy's keys). Each loads into its policy's own
section, with the weights and the policy's config exactly as saved, builds again from its
section, and a save and reload under this version gives the same back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from embodied.config import ConfigError, config_from_dict, load_config, to_dict
from embodied.run.load import load_trained, resume_config
from policies.base import Policy, read_weights
from policies.configs import POLICY_CONFIGS

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints_v1"
KINDS = ["mlp", "cnn", "flow_vla", "ar_vla", "oft_vla"]


def _saved(kind: str) -> tuple[Path, dict, dict]:
    ckpt = OLD / kind / "checkpoints" / "iter_000001"
    return ckpt, json.loads((ckpt / "meta.json").read_text()), json.loads((ckpt / "policy" / "config.json").read_text())


@pytest.mark.parametrize("kind", KINDS)
def test_an_old_checkpoint_loads_into_its_policys_section(kind, tmp_path):
    ckpt, meta, saved = _saved(kind)
    assert set(meta["config"]["policy"]) > {f.name for f in dataclasses.fields(POLICY_CONFIGS[kind])}  # the union
    got, cfg, policy = load_trained(OLD / kind)
    assert got == ckpt and type(cfg.policy) is POLICY_CONFIGS[kind]
    own = to_dict(cfg.policy)
    assert own == {k: meta["config"]["policy"][k] for k in own}  # every key it has, as saved
    assert cfg.env == config_from_dict(meta["config"], saved=True).env and cfg.env.task == "Reach"
    # the policy: its class, config and weights exactly as saved
    assert policy.name == kind and dataclasses.asdict(policy.config) == saved["config"]
    weights = read_weights(ckpt / "policy" / "model.safetensors")
    mine = policy.weights_to_save()
    assert mine.keys() == weights.keys() and all(torch.equal(mine[k], weights[k]) for k in weights)
    # saved again by this version and reloaded: the same policy and config
    policy.save_pretrained(tmp_path / "again")
    again = Policy.from_pretrained(tmp_path / "again")
    assert dataclasses.asdict(again.config) == saved["config"]
    assert all(torch.equal(again.weights_to_save()[k], weights[k]) for k in weights)
    assert config_from_dict(to_dict(cfg)) == cfg  # the new layout round-trips strictly


@pytest.mark.parametrize("kind", ["flow_vla", "ar_vla", "oft_vla"])
def test_an_old_vla_section_builds_its_policy_with_its_own_overrides(kind):
    """build_policy reads only the section's own keys: the saved num_steps / temperature /
    execute_steps reach the built VLA."""
    from policies.registry import build_policy
    from sims.vecenv import EnvSpec

    ckpt, meta, _ = _saved(kind)
    _, cfg, _ = load_trained(OLD / kind, [f"policy.init_from={ckpt / 'policy'}"])
    spec = EnvSpec("Reach", 2, 4, 9, 15, 50, 20.0, cameras=("front",))
    policy = build_policy(cfg.policy, spec)
    pol = meta["config"]["policy"]
    assert policy.config.execute_steps == (pol["execute_steps"] or policy.config.execute_steps)
    if kind == "flow_vla":
        assert policy.config.num_steps == pol["num_steps"] == 3
    if kind == "ar_vla":
        assert policy.config.temperature == pol["temperature"] == 1.2


def test_an_old_run_resumes_and_a_key_of_another_policy_is_refused_in_one_line(tmp_path):
    cfg, ckpt = resume_config(OLD / "ar_vla", [f"train.run_dir={tmp_path}"])
    assert ckpt.name == "iter_000001" and cfg.train.algorithm == "grpo" and cfg.policy.greedy == "mean"
    with pytest.raises(ConfigError) as e:  # a new config: only flow_vla's keys
        load_config(None, ["policy.name=flow_vla", "policy.temperature=1.0"])
    assert str(e.value) == ("unknown config key 'policy.temperature' for policy.name=flow_vla; allowed: name, "
                            "init_from, execute_steps, critic_obs, freeze, lora_rank, frozen_dtype, checkpointing, "
                            "num_steps, noise_method, noise_std_min, noise_std_max, sde_noise_level")
    with pytest.raises(ConfigError, match=r"^unknown config key 'policy.obs_key' for policy.name=cnn; allowed: name, "):
        load_config(None, ["policy.name=cnn", "policy.obs_key=state"])
    with pytest.raises(ConfigError, match=r"^policy.name: 'rnn' is not allowed; choose one of mlp, cnn, flow_vla"):
        load_config(None, ["policy.name=rnn"])
