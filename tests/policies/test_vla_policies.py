"""Unit tests of the VLA policies: tokenizer, cached flow sampling, AR ratio, save/load."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from policies.base import Policy, PolicyLoadError
from policies.tokenizer import InstructionTokenizer
from policies.vla.autoregressive import ARVLA, vertex_bin
from policies.vla.config import ARVLAConfig, FlowVLAConfig, make_config
from policies.vla.flow import FlowVLA
from vla_batch import INSTR, vla_obs as _obs  # tests/vla_batch.py


def test_tokenizer_trains_offline_and_round_trips(tmp_path):
    tok = InstructionTokenizer.train(INSTR)
    ids, mask = tok.batch(["Push the RED cube", "zebra"], max_length=8)
    assert ids.shape == (2, 8) and mask.dtype == torch.bool
    assert mask[0].sum() == 6 and ids[1, 1] == tok.unk_id  # [BOS] zebra->[UNK] [EOS]
    tok.save(tmp_path)
    again = InstructionTokenizer.load(tmp_path)
    assert torch.equal(again.batch(INSTR, 12)[0], tok.batch(INSTR, 12)[0])
    assert InstructionTokenizer.train(INSTR).tok.get_vocab() == tok.tok.get_vocab()  # deterministic


def test_flow_act_shapes_and_sft_loss():
    p = FlowVLA(FlowVLAConfig(num_steps=3))
    obs = _obs()
    loss = p.sft_loss({**obs, "action_valid": torch.ones(4, 4, dtype=torch.bool)}, torch.rand(4, 4, 4) * 2 - 1)
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert p.expert.action_out.weight.grad is not None and p.prefix.vision.embeddings.patch_embedding.weight.grad is not None
    out = p.act(obs)
    assert out.actions.shape == (4, 4, 4) and out.actions.abs().max() <= 1.0
    assert out.replay["chain"].shape == (4, 3 + 1, 4, 32) and out.value.shape == (4,)
    ev = p.evaluate(obs, out.replay)
    assert torch.equal(ev.log_prob, out.log_prob) and torch.allclose(ev.value, out.value, atol=1e-6)


@pytest.mark.parametrize("steps", [1, 4, 10])
def test_flow_prefix_runs_once_per_act(steps):
    """One prefix (vision + LM) forward, then N expert forwards that reuse its KV cache."""
    p = FlowVLA(FlowVLAConfig(critic=False)).eval()
    counts = {"vision": 0, "lm": 0, "expert": 0}
    for key, module in (("vision", p.prefix.vision), ("lm", p.prefix.base), ("expert", p.expert)):
        module.register_forward_hook(lambda *_, k=key: counts.__setitem__(k, counts[k] + 1))
    p.act(_obs(), num_steps=steps)
    assert counts == {"vision": 1, "lm": 1, "expert": steps}


def test_expert_groups_equal_separate_forwards():
    """G denoising points per row in one grouped forward equal G separate forwards."""
    p = FlowVLA(FlowVLAConfig(critic=False)).eval()
    prefix, state = p.encode(_obs())
    x, t = torch.randn(4, 3, 4, 32), torch.rand(4, 3)
    with torch.no_grad():
        v, h = p.expert(prefix.kv, prefix.mask, state, x, t, with_hidden=True)
        for g in range(3):
            vg, hg = p.expert(prefix.kv, prefix.mask, state, x[:, g], t[:, g], with_hidden=True)
            torch.testing.assert_close(v[:, g], vg, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(h[:, g], hg, atol=1e-5, rtol=1e-5)


def test_flow_denoising_reuses_the_same_cache():
    """Sampling through the cache equals recomputing the prefix at every step."""
    p = FlowVLA(FlowVLAConfig(num_steps=4, critic=False)).eval()
    obs = _obs()
    prefix, state = p.encode(obs)
    noise = torch.randn(4, 4, 32)
    with torch.no_grad():
        cached = p.sample(prefix, state, noise, 4)[0][:, -1]
        x = noise
        for i in range(4):
            fresh, _ = p.encode(obs)
            x = x - p.velocity(fresh, state, x, torch.full((4,), 1.0 - i / 4)) / 4
    torch.testing.assert_close(cached, x, atol=1e-5, rtol=0)


def test_ar_evaluate_reproduces_act_log_prob():
    p = ARVLA(ARVLAConfig(temperature=1.6)).eval()
    obs = _obs(6)
    out = p.act(obs, deterministic=False)
    assert out.replay["bins"].shape == (6, 16) and out.replay["bins"].dtype == torch.long
    with torch.no_grad():
        ev = p.evaluate(obs, out.replay)
    ratio = torch.exp(ev.log_prob - out.log_prob)
    assert (ratio - 1).abs().max() < 1e-5
    # The cached decoding's own log-prob agrees with the teacher-forced one up to float error.
    assert (out.replay["decode_log_prob"] - out.log_prob).abs().max() < 1e-3
    assert (ev.entropy > 0).all() and ev.value.shape == (6,)


def test_ar_gaussian_label_targets():
    """label_sigma -> 0 gives the one-hot cross-entropy, a very wide one the uniform target's."""
    torch.manual_seed(0)
    p = ARVLA(ARVLAConfig())
    obs, actions = _obs(), torch.rand(4, 4, 4) * 2 - 1
    torch.manual_seed(1)
    one_hot = p.sft_loss(obs, actions)
    p.config.label_sigma = 1e-3
    torch.testing.assert_close(p.sft_loss(obs, actions), one_hot)
    p.config.label_sigma = 1e6
    logp, _ = p._teacher_forced(obs, p.to_bins(actions))  # [B, M, 256]
    torch.testing.assert_close(p.sft_loss(obs, actions), -logp.mean())
    with pytest.raises(ValueError, match="label_sigma"):
        ARVLAConfig(label_sigma=-1.0)


@pytest.mark.parametrize("state_token", [True, False])
def test_ar_reads_the_state_only_through_its_state_token(state_token):
    """With state_token the first action token's logits depend on the proprioceptive state;
    without it the prefix is images and text only and the state changes nothing."""
    torch.manual_seed(0)
    p = ARVLA(ARVLAConfig(state_token=state_token))
    obs = _obs()
    moved = {**obs, "state": obs["state"] + 1.0}
    bins = torch.zeros(4, p.config.chunk_size * p.config.action_dim, dtype=torch.long)
    with torch.no_grad():
        a, _ = p._teacher_forced(obs, bins)
        b, _ = p._teacher_forced(moved, bins)
    assert (p.state_proj is not None) == state_token
    assert (a - b).abs().max().item() > 1e-4 if state_token else torch.equal(a, b)


def test_ar_greedy_argmax_or_mean():
    """greedy="argmax" picks the most likely bin; "mean" the bin nearest the mean, and act uses it."""
    p = ARVLA(ARVLAConfig(greedy="mean"))
    probs = torch.zeros(2, 256)
    probs[0, 10], probs[0, 21] = 0.6, 0.4  # mean 14.4 -> bin 14; argmax 10
    probs[1, 200] = 1.0
    assert p._greedy(probs.log()).tolist() == [14, 200]
    p.config.greedy = "argmax"
    assert p._greedy(probs.log()).tolist() == [10, 200]
    p = ARVLA(ARVLAConfig(greedy="mean")).eval()
    out = p.act(_obs(2), deterministic=True)
    logp, _ = p._teacher_forced(_obs(2), out.replay["bins"])  # [B, M, nb]; its first row decides the first token
    assert torch.equal(out.replay["bins"][:, 0], p._greedy(logp[:, 0]))
    with pytest.raises(ValueError, match="greedy"):
        ARVLAConfig(greedy="mode")


def test_ar_greedy_vertex_finds_the_peak_of_a_bump_cut_by_the_range():
    """greedy="vertex": the centre of a Gaussian bump over the bins, also where the range cuts
    the bump (a demonstrated action at +-1), where the mean is pulled inwards by ~0.8 sigma."""
    j = torch.arange(256, dtype=torch.float64)
    bump = lambda c, s: -0.5 * ((j - c) / s) ** 2  # noqa: E731  logits of a Gaussian bump
    logits = torch.stack([bump(100.3, 32), bump(255, 32), bump(0, 20), bump(250, 32) + 0.3 * torch.randn(256)])
    p = ARVLA(ARVLAConfig(greedy="vertex"))
    got = p._greedy(logits.float())
    assert got[:3].tolist() == [100, 255, 0] and abs(got[3].item() - 250) <= 3
    p.config.greedy = "mean"
    assert p._greedy(logits.float())[1].item() < 232  # the mean: 255 - 0.8 * 32
    one = torch.full((2, 256), -torch.inf)
    one[0, 7], one[1, 7:9] = 0.0, 0.0  # no peak to fit: one bin, two equal bins -> the mean
    assert vertex_bin(one).tolist() == [7, 8]


def test_ar_bins_round_trip():
    p = ARVLA(ARVLAConfig())
    a = torch.rand(3, 4, 4) * 2 - 1
    bins = p.to_bins(a)
    assert bins.min() >= 0 and bins.max() < 256
    assert (p.from_bins(bins) - a).abs().max() <= 1.0 / 256 + 1e-6
    assert p.base_id == p.text_vocab  # action ids sit at the end of the vocabulary


@pytest.mark.parametrize("cls,cfg_cls", [(FlowVLA, FlowVLAConfig), (ARVLA, ARVLAConfig)])
def test_save_load_bit_identical(tmp_path, cls, cfg_cls):
    p = cls(make_config(cfg_cls, "tiny", chunk_size=2)).eval()
    p.set_stats({"state": {"mean": [0.1] * 9, "std": [2.0] * 9}, "action": {"mean": [0.0] * 4, "std": [0.5] * 4}})
    p.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "tokenizer.json").is_file()
    q = Policy.from_pretrained(tmp_path / "ckpt").eval()
    assert type(q) is cls and torch.equal(q.state_stats.std, p.state_stats.std)
    obs = _obs()
    a, b = p.act(obs, deterministic=True), q.act(obs, deterministic=True)
    assert torch.equal(a.actions, b.actions) and torch.equal(a.value, b.value)
    torch.manual_seed(1)
    la = p.sft_loss(obs, torch.zeros(4, 2, 4))
    torch.manual_seed(1)
    assert torch.equal(la, q.sft_loss(obs, torch.zeros(4, 2, 4)))


def test_bad_checkpoints_give_one_line_errors(tmp_path):
    p = FlowVLA(FlowVLAConfig())
    d = tmp_path / "ckpt"
    p.save_pretrained(d)
    state = load_file(str(d / "model.safetensors"))
    del state["expert.action_out.bias"]
    save_file(state, str(d / "model.safetensors"))
    with pytest.raises(PolicyLoadError, match=r"missing \['expert.action_out.bias'\]") as e:
        Policy.from_pretrained(d)
    assert "\n" not in str(e.value)

    p.save_pretrained(d)
    meta = json.loads((d / "config.json").read_text())
    meta["config"]["expert_hidden"] = 32
    (d / "config.json").write_text(json.dumps(meta))
    with pytest.raises(PolicyLoadError, match="shape mismatch") as e:
        FlowVLA.from_pretrained(d)
    assert "\n" not in str(e.value)
    with pytest.raises(PolicyLoadError, match="not a policy directory"):
        Policy.from_pretrained(tmp_path / "nothing")
    with pytest.raises(PolicyLoadError, match="holds a 'flow_vla' policy"):
        ARVLA.from_pretrained(d)
