"""OpenVLA-OFT checkpoints (L1-regression variant) load strictly into OFTVLA, compute what OFT
computes from the released tensors, merge an adapter-only checkpoint's LoRA on load, act, train
one PPO iteration through the Gaussian on the L1 mean, reload bit-identically, and every
mismatch is a one-line error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from embodied.config import PPOConfig
from embodied.rl.learner import PPOLearner
from embodied.rl.rollout import RolloutCollector
from pretrained_ckpt_oft import ACTION, CHUNK, IMAGE, STATE, OFTReference, write_base, write_oft
from policies.vla.pretrained import PretrainedError, detect_format, load_pretrained
from policies.vla.pretrained.oft_policy import OFTVLA
from sims.registry import make_env

MAP = {"checkpoint": "tiny synthetic OpenVLA-OFT", "task": "PushCube", "cameras": {"primary": "front", "wrist": "wrist"},
       "image_size": IMAGE, "state_indices": [0, 1, 2, 3, 4], "action_dim": ACTION, "chunk_size": CHUNK,
       "normalization": "bounds_q99", "unnorm_key": "tiny_task"}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("oft")
    ref = OFTReference(seed=0)
    return (ref, write_oft(root / "merged", ref), write_oft(root / "adapter", ref, adapter_only=True),
            write_base(root / "base", ref))


def _obs(B: int = 3) -> dict:
    g = torch.Generator().manual_seed(3)
    return {"state": torch.randn(B, 9, generator=g) * 0.5,
            "rgb_front": torch.randint(0, 256, (B, IMAGE, IMAGE, 3), generator=g, dtype=torch.uint8),
            "rgb_wrist": torch.randint(0, 256, (B, IMAGE, IMAGE, 3), generator=g, dtype=torch.uint8),
            "instruction": ["Push the red cube onto the green square", "reach", "lift the blue cube"][:B]}


def test_loaded_oft_matches_ofts_forward(ckpt):
    ref, merged, _, _ = ckpt
    assert detect_format(merged) == "openvla_oft"
    policy = load_pretrained(merged, MAP)
    obs = _obs()
    out = policy.act(obs, deterministic=True)
    assert out.actions.shape == (3, CHUNK, ACTION) and torch.isfinite(out.actions).all()
    want = torch.stack([ref.actions(policy.tokenizer.hf, [obs["rgb_front"][i], obs["rgb_wrist"][i]],
                                    obs["state"][i, :STATE], obs["instruction"][i]) for i in range(3)])
    # OFT runs one row at a time; the batch pads between the prompt and the action tokens
    print(f"OFT actions vs the reference: max abs difference {(out.actions - want).abs().max().item():.2g}")
    assert (out.actions - want).abs().max() < 1e-4
    # the comparison would see a slice off by one, causal attention or a wrong class-token position
    with torch.no_grad():
        mean, _ = policy.forward_mean(obs)
        seq = policy.sequence
        policy.sequence = lambda o: (lambda e, m, at: (e, m, at + 1))(*seq(o))
        assert (policy.forward_mean(obs)[0] - mean).abs().max() > 1e-2
        del policy.sequence
        policy.config.prefix_attention = "causal"
        assert (policy.forward_mean(obs)[0] - mean).abs().max() > 1e-2
        policy.config.prefix_attention = "bidirectional"
        pos = policy.prefix.vision.dino.embeddings.position_embeddings
        pos[:, 0] = torch.randn(pos.shape[-1], generator=torch.Generator().manual_seed(0))
        assert (policy.forward_mean(obs)[0] - mean).abs().max() > 1e-2
    report = policy.load_report
    assert sorted({v.split(":")[0] for v in report.consumed.values()}) == [
        "SigLIP's attention-pooling head", "already merged into the model weights (OFT saves both)",
        "the LM's vocabulary head", "the tower's last block"]
    assert {k.split(".")[0] for k in report.fresh} == {"prefix", "log_std", "critic", "state_stats", "action_stats"}


def test_adapter_only_checkpoint_merges_lora_on_load(ckpt):
    ref, merged, adapter, base = ckpt
    a = load_pretrained(merged, MAP).state_dict()
    b = load_pretrained(adapter, MAP, base=base).state_dict()
    placed = [k for k in a if not k.startswith("critic.")]  # the critic starts fresh, from random weights
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in placed) < 1e-6
    w = "prefix.lm.layers.0.self_attn.q_proj.weight"
    assert (b[w] - ref.base["language_model.model.layers.0.self_attn.q_proj.weight"]).abs().max() > 1e-2  # merged
    with pytest.raises(PretrainedError, match="no model weights; an adapter-only checkpoint needs lora_adapter/ and base"):
        load_pretrained(adapter, MAP)


def test_act_train_save_and_reload(ckpt, tmp_path):
    _, merged, _, _ = ckpt
    policy = load_pretrained(merged, {**MAP, "execute_steps": 2})
    obs = _obs(2)
    out = policy.act(obs)
    assert out.actions.shape == (2, 2, ACTION) and out.log_prob_parts.shape == (2, 2, ACTION)
    ev = policy.evaluate(obs, out.replay)
    assert torch.allclose(ev.log_prob, out.log_prob, atol=1e-5)  # the first PPO ratio is 1
    env = make_env("PushCube", 2, obs_mode="rgb", image_size=IMAGE, cameras=("front", "wrist"))
    col = RolloutCollector(env, policy, 2)
    col.reset(seed=0)
    before = {k: v.clone() for k, v in policy.head.state_dict().items()}
    stats = PPOLearner(policy, PPOConfig(epochs=1, minibatches=1, lr=1e-4)).update(col.collect())
    env.close()
    assert abs(stats["ratio"] - 1.0) < 1e-4
    assert any(not torch.equal(v, policy.head.state_dict()[k]) for k, v in before.items())
    policy.save_pretrained(tmp_path / "ours")
    again = OFTVLA.from_pretrained(tmp_path / "ours")
    a, b = policy.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(again.act(obs, deterministic=True).actions, policy.act(obs, deterministic=True).actions)


def _broken(src, tmp_path, edit):
    d = tmp_path / "broken"
    shutil.copytree(src, d)
    edit(d)
    return d


def _edit_shard(key_edit, shard: int = 2):
    def edit(d):
        f = d / f"model-0000{shard}-of-00002.safetensors"
        t = load_file(str(f))
        key_edit(t)
        save_file(t, str(f))
    return edit


def _set_config(**fields):
    def edit(d):
        import json

        config = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**config, **fields}))
    return edit


@pytest.mark.parametrize("edit, imap, message", [
    (_set_config(vision_backbone_id="siglip-vit-so400m", timm_model_ids=["vit_so400m_patch14_siglip_224"]), {},
     "vision backbone 'siglip-vit-so400m' .*; only OpenVLA's fused dinosiglip-vit-so-224px"),
    (_set_config(llm_backbone_id="qwen25-0_5b-extra"), {}, "llm_backbone_id 'qwen25-0_5b-extra'; only Llama-family"),
    (_edit_shard(lambda t: t.update({"language_model.model.extra.weight": torch.zeros(2)})), {},
     r"unexpected checkpoint key 'language_model.model.extra.weight'; it maps to 'prefix.lm.extra.weight', which"),
    (_edit_shard(lambda t: t.update({"vision_backbone.featurizer.blocks.0.ls3.gamma": torch.zeros(2)}), 1), {},
     r"unexpected checkpoint key 'vision_backbone.featurizer.blocks.0.ls3.gamma' \(1 unexpected\); the OFT layout"),
    (_edit_shard(lambda t: t.pop("language_model.model.layers.1.mlp.up_proj.weight")), {},
     r"missing checkpoint key for 'prefix.lm.layers.1.mlp.up_proj.weight' \(1 missing\)"),
    (lambda d: (d / "action_head--150000_checkpoint.pt").unlink(), {}, r"missing file action_head--\*.pt"),
    (lambda d: save_file({"base_model.model.projector.fc9.lora_A.weight": torch.zeros(4, 2),
                          "base_model.model.projector.fc9.lora_B.weight": torch.zeros(2, 4)},
                         str(d / "lora_adapter" / "adapter_model.safetensors")), {},
     r"unexpected adapter key for 'projector.fc9.weight' \(1 unexpected\)"),
    (lambda d: (d / "action_head--150000_checkpoint.pt").write_bytes(b"not a checkpoint"), {}, "corrupt checkpoint file"),
    (lambda d: None, {"unnorm_key": "libero_spatial"},
     "unnorm_key 'libero_spatial' is not there; available: other_task, tiny_task"),
    (lambda d: None, {"unnorm_key": None}, r"2 unnorm keys \['other_task', 'tiny_task'\]; set unnorm_key"),
    (lambda d: None, {"normalization": None}, "OFT checkpoints do not record it"),
    (lambda d: None, {"action_dim": 7}, "action_dim 7; the checkpoint's head outputs 4"),
    (lambda d: torch.save({"module.noise_predictor.x": torch.zeros(1)}, d / "action_head--150000_checkpoint.pt"), {},
     "diffusion head"),
])
def test_mismatches_are_one_line_errors(ckpt, tmp_path, edit, imap, message):
    d = _broken(ckpt[1], tmp_path, edit)
    with pytest.raises(PretrainedError, match=message) as e:
        load_pretrained(d, {**MAP, **imap})
    assert "\n" not in str(e.value)


def test_real_size_layout_maps_strictly_onto_the_preset():
    """Every tensor of a real-size OFT LIBERO checkpoint (names and shapes on the meta device) has
    its place in presets.openvla_oft() or is consumed with a reason, and the loader's architecture,
    read from those shapes and OpenVLA's config, is the preset's."""
    from pretrained_ckpt_oft import VISION_IDS, real_size_oft_keys
    from policies.vla.pretrained.oft import Sources, architecture, place
    from policies.vla.pretrained.presets import openvla_oft

    tensors = real_size_oft_keys()
    source = Sources()
    source.add_file(tensors)
    cfg = openvla_oft()
    config = {"use_fused_vision_backbone": True, "timm_model_ids": VISION_IDS, "image_sizes": [224, 224],
              "text_config": {"model_type": "llama", "vocab_size": 32064}}
    arch = architecture(source.shapes, config, "real")
    assert arch["dino"] == cfg.dino and arch["siglip"] == cfg.vision
    assert {k: arch["lm"][k] for k in cfg.lm} == cfg.lm
    with torch.device("meta"):
        policy = OFTVLA(cfg)
    report = place(policy, source, {}, "real")
    assert len(report.consumed) == 14 + 12 + 13 + 1  # DINOv2's and SigLIP's last blocks, the pooling head, lm_head
    assert report.filled == len(tensors) - len(report.consumed) + 4 * (23 + 26)  # each qkv (weight, bias) fills 3


def test_bfloat16_and_the_converter(ckpt, tmp_path):
    import yaml

    from policies.vla.pretrained.__main__ import main

    _, merged, _, _ = ckpt
    obs = _obs(2)
    full = load_pretrained(merged, MAP).act(obs, deterministic=True).actions
    half = load_pretrained(merged, MAP, dtype="bfloat16")
    assert half.prefix.lm.embed_tokens.weight.dtype == torch.bfloat16 and half.head.fc_in.weight.dtype == torch.float32
    assert (half.act(obs, deterministic=True).actions - full).abs().max() < 0.05  # bf16 rounding (1.6e-2 measured)
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(MAP))
    assert main([str(merged), "--input-map", str(tmp_path / "map.yaml"), "--out", str(tmp_path / "ours")]) == 0
    assert torch.equal(OFTVLA.from_pretrained(tmp_path / "ours").act(obs, deterministic=True).actions, full)


def test_lora_and_frozen_backbone_on_a_loaded_oft(ckpt):
    from policies.vla.lora import apply_lora, trainable_summary

    policy = load_pretrained(ckpt[1], MAP)
    obs = _obs(2)
    before = policy.act(obs, deterministic=True).actions
    wrapped = apply_lora(policy.prefix, 2)  # q, k, v, o of 2 DINOv2, 2 SigLIP and 2 LM layers; the rest frozen
    summary = trainable_summary(policy)
    assert wrapped == 3 * 2 * 4 and set(summary) - {"trainable", "total"} == {
        "prefix", "head", "proprio_proj", "log_std", "critic"}
    assert torch.equal(policy.act(obs, deterministic=True).actions, before)  # fresh adapters change nothing
    with pytest.raises(ValueError, match="empty_token_id: 29871 is outside the LM's"):
        OFTVLA(type(policy.config)(state_dim=5, action_dim=4))


def test_embodied_train_runs_a_converted_oft(ckpt, tmp_path):
    """policy.name=oft_vla with init_from a save_pretrained directory: `embodied train`'s
    loop runs PPO on it (the Gaussian around the L1 mean), evaluates and saves; a
    flow- or AR-only knob is refused in one line."""
    from embodied.config import load_config
    from embodied.rl.train import train
    from policies.base import PolicyLoadError
    from policies.registry import build_policy

    _, merged, _, _ = ckpt
    load_pretrained(merged, {**MAP, "execute_steps": 2}).save_pretrained(tmp_path / "init")
    cfg = load_config(None, [
        "env.task=PushCube", "env.num_envs=2", "env.obs_mode=rgb", f"env.image_size={IMAGE}",
        "env.cameras=[front,wrist]", "policy.name=oft_vla", f"policy.init_from={tmp_path / 'init'}",
        "policy.critic_obs=privileged", "ppo.rollout_steps=2", "ppo.epochs=1", "ppo.minibatches=1",
        "train.total_steps=8", "train.eval_every=1", "train.eval_episodes=2", "train.save_every=0",
        "train.video_episodes=0", "train.torch_threads=1", f"train.run_dir={tmp_path / 'run'}"])
    summary = train(cfg)
    assert summary["env_steps"] >= 8 and summary["eval_curve"]
    from policies.base import Policy

    again = Policy.from_pretrained(Path(summary["checkpoint"]) / "policy")  # as `embodied eval` loads it
    assert isinstance(again, OFTVLA) and again.config.execute_steps == 2
    cfg.policy.temperature = 0.5
    with pytest.raises(PolicyLoadError, match="policy.temperature applies to ar_vla only, not policy.name=oft_vla"):
        build_policy(cfg.policy, make_env("PushCube", 1).spec)
