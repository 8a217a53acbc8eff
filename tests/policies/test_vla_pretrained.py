"""Real-size configs read a user's local Hugging Face directories, never the network.

A small SigLIP vision tower and a small Qwen2 LM with a fast tokenizer are written with
`save_pretrained` to temporary directories, standing in for a downloaded SigLIP / Qwen2
checkpoint (the loading path is the same; only the sizes differ). The VLAs built with
`pretrained_vision` / `pretrained_lm` must hold exactly those weights and use that
tokenizer, save into one self-contained directory (paths cleared, architecture recorded)
and reload bit-identically; a missing directory is a one-line error.
"""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, SiglipVisionConfig,
                          SiglipVisionModel)

from policies.base import Policy
from policies.vla.autoregressive import ARVLA
from policies.vla.config import ARVLAConfig, FlowVLAConfig
from policies.vla.flow import FlowVLA

INSTRUCTION = "push the red cube onto the green square"


@pytest.fixture(scope="module")
def local_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    vision = SiglipVisionModel(SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                  num_attention_heads=2, image_size=64, patch_size=16))
    vision.save_pretrained(root / "siglip")
    lm = Qwen2ForCausalLM(Qwen2Config(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      tie_word_embeddings=True))
    lm.save_pretrained(root / "qwen2")
    # A byte-level BPE tokenizer as Qwen2's, trained on the spot (AutoTokenizer reads it as Qwen2's class).
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator([INSTRUCTION, "move the gripper to the target"] * 5, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>",
                            pad_token="<|endoftext|>").save_pretrained(root / "qwen2")
    return root, vision.state_dict(), lm.state_dict()


def _obs(B: int = 3) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"state": torch.randn(B, 9, generator=g),
            "rgb_front": torch.randint(0, 256, (B, 64, 64, 3), generator=g, dtype=torch.uint8),
            "instruction": [INSTRUCTION] * B}


@pytest.mark.parametrize("cls,cfg_cls", [(FlowVLA, FlowVLAConfig), (ARVLA, ARVLAConfig)])
def test_local_weights_load_save_and_reload(local_checkpoints, tmp_path, cls, cfg_cls):
    root, vision_sd, lm_sd = local_checkpoints
    p = cls(cfg_cls(pretrained_vision=str(root / "siglip"), pretrained_lm=str(root / "qwen2"),
                    lm_type="qwen2", chunk_size=2)).eval()
    for k, v in vision_sd.items():
        assert torch.equal(p.prefix.vision.state_dict()[k], v), k
    lm_now = p.prefix.lm.state_dict()
    # The flow policy keeps the base model (keys without "model.", no LM head); the AR one all.
    shared = {k: (k if cls is ARVLA else k.removeprefix("model.")) for k in lm_sd}
    shared = {k: key for k, key in shared.items() if key in lm_now}
    assert len(shared) >= len(lm_sd) - 1  # at most the LM head is not there
    for k, key in shared.items():
        assert torch.equal(lm_now[key], lm_sd[k]), k
    assert p.tokenizer.hf is not None
    ids, mask = p.text(_obs(), 3)
    local = AutoTokenizer.from_pretrained(root / "qwen2", local_files_only=True)
    assert ids[0, mask[0]].tolist() == local(INSTRUCTION)["input_ids"]  # the local tokenizer's ids
    assert local.decode(ids[0, mask[0]]) == INSTRUCTION
    if cls is ARVLA:
        assert p.base_id == 320 - 256  # a real LM gives up its last 256 ids to the action bins

    p.save_pretrained(tmp_path / "ckpt")
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())["config"]
    assert cfg["pretrained_vision"] is None and cfg["pretrained_lm"] is None and cfg["lm_type"] == "qwen2"
    q = Policy.from_pretrained(tmp_path / "ckpt").eval()
    obs = _obs()
    a, b = p.act(obs, deterministic=True), q.act(obs, deterministic=True)
    assert torch.equal(a.actions, b.actions)


def test_missing_local_directory_is_a_one_line_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="pretrained_lm: .* is not a directory") as e:
        ARVLA(ARVLAConfig(pretrained_lm=str(tmp_path / "nowhere"), lm_type="qwen2"))
    assert "\n" not in str(e.value)
