"""SmolVLA checkpoints in LeRobot's format load strictly into FlowVLA and compute what SmolVLA
computes (prefix keys / values, velocity at a fixed (x_t, t), actions from fixed noise), act on
an env observation, train one RL iteration and reload bit-identically."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from embodied.config import PPOConfig
from embodied.rl.learner import PPOLearner
from embodied.rl.rollout import RolloutCollector
from pretrained_ckpt import ACTION, CHUNK, PAD, STATE
from pretrained_ckpt_smolvla import SMOL_IMAGE, SmolVLAReference, write_lerobot_smolvla
from policies.base import Policy
from policies.vla.pretrained import PretrainedError, detect_format, load_pretrained
from sims.registry import make_env

MAP = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "input_maps" /
                      "tiny_smolvla__pushcube.yaml").read_text())


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("smolvla")
    ref = SmolVLAReference(seed=0)
    return ref, write_lerobot_smolvla(root / "smolvla", ref, ["top"], root / "smolvlm2"), root / "smolvlm2"


def _obs(B: int = 3) -> dict:
    g = torch.Generator().manual_seed(3)
    return {"state": torch.randn(B, 9, generator=g),
            "rgb_front": torch.randint(0, 256, (B, SMOL_IMAGE, SMOL_IMAGE, 3), generator=g, dtype=torch.uint8),
            "instruction": ["push the red cube onto the green square", "reach the target", "lift the blue cube"][:B]}


def test_loaded_smolvla_matches_smolvlas_forward(ckpt):
    ref, path, vlm = ckpt
    assert detect_format(path) == "lerobot_smolvla"
    policy = load_pretrained(path, MAP, vlm)
    assert policy.config.expert_arch == "smolvla" and policy.config.pixel_shuffle == 2
    obs = _obs()
    img = [obs["rgb_front"].permute(0, 3, 1, 2).float() / 255.0 * 2.0 - 1.0]
    ids, mask = policy.text(obs, 3)
    s = torch.nn.functional.pad(policy.state_stats.normalize(obs["state"][:, :STATE]), (0, PAD - STATE))
    with torch.no_grad():
        pad, cache = ref.prefix(img, ids, mask, s)
        prefix, state = policy.encode(obs)
        assert torch.equal(prefix.mask, pad)
        real = pad[:, None, :, None].expand_as(prefix.kv[0][0])
        for (k, v), layer in zip(prefix.kv, cache.layers):
            assert (k - layer.keys)[real].abs().max() < 1e-4 and (v - layer.values)[real].abs().max() < 1e-4
        g = torch.Generator().manual_seed(7)
        x_t, t = torch.randn(3, CHUNK, PAD, generator=g), torch.tensor([0.9, 0.5, 0.13])
        assert (policy.velocity(prefix, state, x_t, t) - ref.velocity(pad, cache, s, x_t, t)).abs().max() < 1e-4
        noise = torch.randn(3, CHUNK, PAD, generator=g)
        chain, _ = policy.sample(prefix, state, noise, 4)
        assert (chain[:, -1] - ref.sample(pad, cache, s, noise, 4)).abs().max() < 1e-4
    assert list(policy.load_report.consumed) == ["model.vlm_with_expert.vlm.lm_head.weight"]


def test_act_train_save_and_reload(ckpt, tmp_path):
    _, path, vlm = ckpt
    policy = load_pretrained(path, MAP, vlm)
    policy.config.noise_method = "flow_noise"
    env = make_env("PushCube", 4, obs_mode="rgb", image_size=SMOL_IMAGE)
    col = RolloutCollector(env, policy, 2)
    col.reset(seed=0)
    before = {k: v.clone() for k, v in policy.expert.state_dict().items()}
    stats = PPOLearner(policy, PPOConfig(epochs=1, minibatches=1, lr=1e-4)).update(col.collect())
    env.close()
    assert abs(stats["ratio"] - 1.0) < 1e-4  # one minibatch: scored before its step
    assert any(not torch.equal(v, policy.expert.state_dict()[k]) for k, v in before.items())
    policy.save_pretrained(tmp_path / "ours")
    again = Policy.from_pretrained(tmp_path / "ours")
    a, b = policy.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    obs = _obs(2)
    assert torch.equal(again.act(obs, deterministic=True).actions, policy.act(obs, deterministic=True).actions)


def test_unsupported_smolvla_layouts_are_one_line_errors(ckpt, tmp_path):
    import json
    import shutil

    ref, path, vlm = ckpt
    d = tmp_path / "other"
    shutil.copytree(path, d)
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "attention_mode": "self_attn"}))
    with pytest.raises(PretrainedError, match="attention_mode='self_attn' is not supported"):
        load_pretrained(d, MAP, vlm)
    with pytest.raises(PretrainedError, match="missing file \\(the SmolVLM2 config beside its tokenizer\\)"):
        load_pretrained(path, MAP, tmp_path)
