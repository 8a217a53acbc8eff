"""pi0 checkpoints in LeRobot's and openpi's formats load strictly into FlowVLA and compute
what pi0 computes.

Synthetic checkpoints (tests/pretrained_ckpt.py) carry the real key names and file sets at
tiny widths. Loaded, the policy must match pi0's forward built from the same transformers
modules (prefix KV cache, velocity at a fixed (x_t, t), actions from fixed noise) to 1e-4,
act on an env observation, and survive save_pretrained / from_pretrained bit for bit. Every
malformed input is a one-line error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
import torch
from safetensors.torch import load_file, save_file

from pretrained_ckpt import ACTION, CHUNK, IMAGE, PAD, STATE, Pi05Reference, Pi0Reference, norm_stats, \
    write_lerobot_pi0, write_lerobot_pi05, write_openpi, write_tokenizer
from policies.base import Policy
from policies.vla.pretrained import InputMap, PretrainedError, detect_format, load_pretrained
from sims.registry import make_env

ROOT = Path(__file__).resolve().parents[2]
MAP = yaml.safe_load((ROOT / "configs" / "input_maps" / "tiny_pi0__pushcube.yaml").read_text())
OPENPI_MAP = {**MAP, "cameras": {"base_0_rgb": "front"}, "normalization": "mean_std"}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("pi0")
    ref = Pi0Reference(seed=0)
    return {"ref": ref, "lerobot": write_lerobot_pi0(root / "lerobot", ref, ["image"]),
            "openpi": write_openpi(root / "openpi", ref), "tok": write_tokenizer(root / "tok"), "root": root}


def _obs(B: int = 3) -> dict:
    g = torch.Generator().manual_seed(3)
    return {"state": torch.randn(B, 9, generator=g),
            "rgb_front": torch.randint(0, 256, (B, IMAGE, IMAGE, 3), generator=g, dtype=torch.uint8),
            "instruction": ["push the red cube onto the green square", "reach the target", "lift the blue cube"][:B]}


def _reference_inputs(policy, obs):
    img = obs["rgb_front"].permute(0, 3, 1, 2).float() / 255.0 * 2.0 - 1.0
    ids, mask = policy.text(obs, obs["state"].shape[0])
    s = policy.state_stats.normalize(obs["state"][:, :STATE])
    return [img], ids, mask, torch.nn.functional.pad(s, (0, PAD - STATE))


def test_shipped_input_maps_load():
    for path in sorted((ROOT / "configs" / "input_maps").glob("*.yaml")):
        m = InputMap.load(path)
        assert m.cameras and len(m.state_indices) >= 1 and m.chunk_size >= 1, path
    assert MAP["image_size"] == IMAGE and MAP["chunk_size"] == CHUNK and MAP["action_dim"] == ACTION


def test_formats_are_detected_from_the_files(ckpts, tmp_path):
    assert detect_format(ckpts["lerobot"]) == "lerobot_pi0"
    assert detect_format(ckpts["openpi"]) == "openpi"
    (tmp_path / "oft").mkdir()
    (tmp_path / "oft" / "dataset_statistics.json").write_text("{}")
    (tmp_path / "oft" / "action_head--150000_checkpoint.pt").write_bytes(b"")
    assert detect_format(tmp_path / "oft") == "openvla_oft"
    with pytest.raises(PretrainedError, match=r"config.json: missing file \(OpenVLA config\)"):
        load_pretrained(tmp_path / "oft", MAP, ckpts["tok"])
    with pytest.raises(PretrainedError, match="no known checkpoint layout"):
        detect_format(ckpts["tok"])


@pytest.mark.parametrize("fmt", ["lerobot", "openpi"])
def test_loaded_pi0_matches_pi0s_forward(ckpts, fmt):
    """Prefix keys / values, the velocity at a fixed (x_t, t) and actions from fixed noise."""
    policy = load_pretrained(ckpts[fmt], MAP if fmt == "lerobot" else OPENPI_MAP, ckpts["tok"])
    ref, obs = ckpts["ref"], _obs()
    images, ids, mask, state = _reference_inputs(policy, obs)
    with torch.no_grad():
        pad, cache = ref.prefix(images, ids, mask)
        prefix, our_state = policy.encode(obs)
        torch.testing.assert_close(our_state, state)
        assert torch.equal(prefix.mask, pad)
        real = pad[:, None, :, None].expand_as(prefix.kv[0][0])  # pads' keys are never attended
        for (k, v), layer in zip(prefix.kv, cache.layers):
            assert (k - layer.keys)[real].abs().max() < 1e-4 and (v - layer.values)[real].abs().max() < 1e-4
        g = torch.Generator().manual_seed(7)
        x_t, t = torch.randn(3, CHUNK, PAD, generator=g), torch.tensor([0.9, 0.5, 0.13])
        v_ref = ref.velocity(pad, cache, state, x_t, t)
        assert (policy.velocity(prefix, our_state, x_t, t) - v_ref).abs().max() < 1e-4
        noise = torch.randn(3, CHUNK, PAD, generator=g)
        chain, _ = policy.sample(prefix, our_state, noise, 4)
        assert (chain[:, -1] - ref.sample(pad, cache, state, noise, 4)).abs().max() < 1e-4
    r = policy.load_report
    assert r.source_tensors == len(load_file(str(ckpts[fmt] / "model.safetensors")))
    assert "paligemma_with_expert.gemma_expert.lm_head.weight" in {k.removeprefix("model.") for k in r.consumed}
    assert {k.split(".")[0] for k in r.fresh} == {"state_stats", "action_stats", "noise_head", "critic"}


def test_lerobot_and_openpi_stats_give_their_own_normalisations(ckpts):
    stats = norm_stats()
    lr = load_pretrained(ckpts["lerobot"], MAP, ckpts["tok"])
    a = torch.tensor([[0.3, -0.2, 0.1, 0.5]])
    mean, std = torch.tensor(stats["action"]["mean"]), torch.tensor(stats["action"]["std"])
    torch.testing.assert_close(lr.action_stats.normalize(a), (a - mean) / (std + 1e-8))
    op = load_pretrained(ckpts["openpi"], {**OPENPI_MAP, "normalization": "quantile"}, ckpts["tok"])
    q01, q99 = torch.tensor(stats["action"]["q01"]), torch.tensor(stats["action"]["q99"])
    torch.testing.assert_close(op.action_stats.normalize(a), (a - q01) / (q99 - q01 + 1e-6) * 2 - 1)
    torch.testing.assert_close(op.action_stats.unnormalize(op.action_stats.normalize(a)), a)


def test_quantile_lerobot_checkpoint_and_missing_quantiles(ckpts, tmp_path):
    d = write_lerobot_pi0(tmp_path / "q", ckpts["ref"], ["image"], mode="QUANTILES")
    p = load_pretrained(d, MAP, ckpts["tok"])
    st = norm_stats()["state"]
    q01, q99 = torch.tensor(st["q01"]), torch.tensor(st["q99"])
    x = torch.tensor([st["q01"], st["q99"]])
    torch.testing.assert_close(p.state_stats.normalize(x), torch.stack([-torch.ones(STATE), torch.ones(STATE)]))
    f = d / "policy_preprocessor_step_5_normalizer_processor.safetensors"
    save_file({k: v for k, v in load_file(str(f)).items() if not k.endswith("q01")}, str(f))
    with pytest.raises(PretrainedError, match=r"quantile normalisation needs \['q01', 'q99'\]; missing \['q01'\]"):
        load_pretrained(d, MAP, ckpts["tok"])
    del q01, q99


def test_act_on_an_env_observation_then_save_and_reload_bit_identically(ckpts, tmp_path):
    env = make_env("PushCube", 2, obs_mode="rgb", image_size=IMAGE)
    imap = InputMap.from_dict(MAP)
    imap.check_env(env.spec)
    obs = env.reset(seed=0)
    obs = obs[0] if isinstance(obs, tuple) else obs
    policy = load_pretrained(ckpts["lerobot"], imap, ckpts["tok"])
    out = policy.act(obs, deterministic=True)
    assert out.actions.shape == (2, 3, ACTION) and torch.isfinite(out.actions).all()
    env.step(out.actions[:, 0])
    env.close()
    policy.save_pretrained(tmp_path / "ours")
    again = Policy.from_pretrained(tmp_path / "ours")
    a, b = policy.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(again.act(obs, deterministic=True).actions, out.actions)
    assert again.config.expert_arch == "gemma" and again.config.prompt_template == "{task}\n"


def test_old_transformers_key_layout_loads_the_same_weights(ckpts, tmp_path):
    d = write_lerobot_pi0(tmp_path / "old", ckpts["ref"], ["image"])
    pg = "model.paligemma_with_expert.paligemma."
    renames = [(pg + "model.language_model.", pg + "language_model.model."),
               (pg + "model.vision_tower.", pg + "vision_tower.vision_model."),
               (pg + "model.multi_modal_projector.", pg + "multi_modal_projector."),
               (pg + "lm_head.", pg + "language_model.lm_head.")]
    tensors = load_file(str(d / "model.safetensors"))
    old = {}
    for k, v in tensors.items():
        for a, b in renames:
            if k.startswith(a):
                k = b + k[len(a):]
                break
        old[k] = v
    save_file(old, str(d / "model.safetensors"))
    new = load_pretrained(ckpts["lerobot"], MAP, ckpts["tok"]).state_dict()
    got = load_pretrained(d, MAP, ckpts["tok"]).state_dict()
    assert all(torch.equal(new[k], got[k]) for k in new if not k.startswith(("critic", "noise_head")))


def _edit(d, fn):
    f = d / "model.safetensors"
    save_file(fn(dict(load_file(str(f)))), str(f))


def test_malformed_checkpoints_give_one_line_errors(ckpts, tmp_path):
    ref, tok = ckpts["ref"], ckpts["tok"]

    def fresh(name):
        return write_lerobot_pi0(tmp_path / name, ref, ["image"])

    cases = []
    d = fresh("corrupt")
    (d / "model.safetensors").write_bytes(b"\x00" * 64)
    cases.append((d, MAP, "corrupt safetensors file"))
    d = fresh("truncated")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[:len(data) // 2])
    cases.append((d, MAP, "corrupt safetensors file \\(weights\\): .*not fully covered"))
    d = fresh("nostats")
    (d / "policy_postprocessor_step_1_unnormalizer_processor.safetensors").unlink()
    cases.append((d, MAP, "missing file \\(normalisation statistics\\)"))
    d = fresh("extra")
    _edit(d, lambda t: {**t, "model.action_out_proj.scale": torch.ones(3), "model.foo": torch.ones(1)})
    cases.append((d, MAP, "unexpected checkpoint key 'model.action_out_proj.scale' \\(2 unexpected\\)"))
    d = fresh("dropped")
    _edit(d, lambda t: {k: v for k, v in t.items() if "gemma_expert.model.layers.2.mlp" not in k})
    cases.append((d, MAP, "missing checkpoint key for 'expert.layers.2.gate.weight' \\(3 missing\\)"))
    d = fresh("shape")
    _edit(d, lambda t: {**t, "model.action_time_mlp_out.bias": torch.zeros(63)})
    cases.append((d, MAP, "wrong shape for 'model.action_time_mlp_out.bias': checkpoint \\(63,\\), model \\(64,\\)"))
    d = fresh("pi05")
    _edit(d, lambda t: {**t, "model.time_mlp_in.weight": torch.zeros(2)})
    cases.append((d, MAP, "holds both 'state_proj.weight' \\(pi0\\) and 'time_mlp_in.weight' \\(pi0.5\\)"))
    cases.append((ckpts["lerobot"], {**MAP, "cameras": {"observation.images.image": "front", "observation.images.wrist": "side"}},
                  "camera 'observation.images.wrist' is not an input of the checkpoint"))
    cases.append((ckpts["lerobot"], {**MAP, "state_indices": [0, 1]}, "2 state_indices; the checkpoint's state has 5"))
    cases.append((ckpts["lerobot"], {**MAP, "colour": 1}, "unknown field 'colour'"))
    cases.append((ckpts["openpi"], {**OPENPI_MAP, "normalization": None}, "openpi exports do not record"))
    for path, imap, message in cases:
        with pytest.raises(PretrainedError, match=message) as e:
            load_pretrained(path, imap, tok)
        assert "\n" not in str(e.value), str(e.value)
    empty = write_lerobot_pi0(tmp_path / "empty", ref, ["image", "empty_camera_0"])  # LeRobot's masked slots
    assert load_pretrained(empty, MAP, tok).config.cameras == ["front"]
    two = write_lerobot_pi0(tmp_path / "two", ref, ["image", "wrist"])
    with pytest.raises(PretrainedError, match="checkpoint camera 'observation.images.wrist' has no env camera"):
        load_pretrained(two, {**MAP, "cameras": {"observation.images.image": "front"}}, tok)
    with pytest.raises(PretrainedError, match="env camera 'side' is not rendered by the env"):
        InputMap.from_dict({**MAP, "cameras": {"observation.images.image": "side"}}).check_env(make_env("PushCube", 1).spec)
    with pytest.raises(PretrainedError, match="not a local Hugging Face tokenizer directory"):
        load_pretrained(ckpts["lerobot"], MAP, tmp_path)


def test_bfloat16_backbone_acts(ckpts):
    policy = load_pretrained(ckpts["lerobot"], MAP, ckpts["tok"], dtype="bfloat16")
    assert policy.prefix.lm.embed_tokens.weight.dtype == torch.bfloat16
    assert policy.action_stats.mean.dtype == torch.float32
    out = policy.act(_obs(2))
    assert torch.isfinite(out.actions).all() and torch.isfinite(out.log_prob).all()


@pytest.mark.parametrize("fmt", ["lerobot", "openpi"])
def test_loaded_pi05_matches_pi05s_forward_and_reads_the_state_as_text(ckpts, fmt, tmp_path):
    ref = Pi05Reference(seed=2)
    if fmt == "lerobot":
        path, imap = write_lerobot_pi05(tmp_path / "pi05", ref, ["image"]), MAP
    else:
        path, imap = write_openpi(tmp_path / "pi05", ref), {**OPENPI_MAP, "normalization": "quantile"}
    assert detect_format(path) == ("lerobot_pi05" if fmt == "lerobot" else "openpi")
    policy = load_pretrained(path, imap, ckpts["tok"])
    assert policy.config.expert_arch == "gemma_ada" and policy.config.max_text_len == 200
    obs = _obs()
    s = policy.padded_state(obs).numpy()
    bins = np.digitize(s, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1  # openpi's discretisation
    prompt = policy.prompts(obs["instruction"], obs)[1]
    assert prompt == f"Task: reach the target, State: {' '.join(map(str, bins[1]))};\nAction: "
    ids, mask = policy.text(obs, 3)
    assert (ids[mask] == 1).sum() == 0  # every word and bin is in the vocabulary
    images = [obs["rgb_front"].permute(0, 3, 1, 2).float() / 255.0 * 2.0 - 1.0]
    with torch.no_grad():
        pad, cache = ref.prefix(images, ids, mask)
        prefix, state = policy.encode(obs)
        g = torch.Generator().manual_seed(7)
        x_t, t = torch.randn(3, CHUNK, PAD, generator=g), torch.tensor([0.9, 0.5, 0.13])
        assert (policy.velocity(prefix, state, x_t, t) - ref.velocity(pad, cache, None, x_t, t)).abs().max() < 1e-4
        noise = torch.randn(3, CHUNK, PAD, generator=g)
        chain, _ = policy.sample(prefix, state, noise, 4)
        assert (chain[:, -1] - ref.sample(pad, cache, None, noise, 4)).abs().max() < 1e-4
    out = policy.act(obs)
    assert torch.isfinite(out.actions).all() and torch.isfinite(out.log_prob).all()
    policy.save_pretrained(tmp_path / "ours")
    again = Policy.from_pretrained(tmp_path / "ours")
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in policy.state_dict().items())
    assert torch.equal(again.act(obs, deterministic=True).actions, policy.act(obs, deterministic=True).actions)


def test_the_converter_writes_an_init_from_directory(ckpts, tmp_path, capsys):
    from policies.vla.pretrained.__main__ import main

    imap = ROOT / "configs" / "input_maps" / "tiny_pi0__pushcube.yaml"
    assert main([str(ckpts["lerobot"]), "--input-map", str(imap), "--tokenizer", str(ckpts["tok"]),
                 "--out", str(tmp_path / "init")]) == 0
    assert "checkpoint tensors: 124 placed" in capsys.readouterr().out
    policy = Policy.from_pretrained(tmp_path / "init")
    assert policy.config.expert_arch == "gemma" and policy.config.cameras == ["front"]
    assert main([str(ckpts["tok"]), "--input-map", str(imap), "--tokenizer", str(ckpts["tok"]),
                 "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not (tmp_path / "x").exists()
