import numpy as np
import pytest
import torch

from embodied.run.checkpoint import CheckpointError, flatten_state, load_checkpoint, save_checkpoint, unflatten_state
from embodied.config import PolicyConfig
from policies.registry import build_policy
from sims.vecenv import EnvSpec


def test_flatten_roundtrip():
    state = {"a": torch.arange(3), "b": {"c": np.ones((2, 2)), "d": [1, "x", None, 2.5, {"e": torch.zeros(1)}]},
             0: {"big": 2**100}}
    tensors = {}
    js = flatten_state(state, tensors)
    back = unflatten_state(js, tensors)
    assert torch.equal(back["a"], state["a"])
    assert isinstance(back["b"]["c"], np.ndarray) and np.array_equal(back["b"]["c"], state["b"]["c"])
    assert back["b"]["d"][:4] == [1, "x", None, 2.5] and back[0]["big"] == 2**100


def test_save_is_atomic_and_latest_moves(tmp_path):
    spec = EnvSpec("T", 2, 4, 7, 20, 50, 20.0)
    policy = build_policy(PolicyConfig(), spec)
    root = tmp_path / "checkpoints"
    save_checkpoint(root, "iter_000001", policy, {"x": torch.ones(2)}, {"iteration": 1})
    save_checkpoint(root, "iter_000002", policy, {"x": torch.zeros(2)}, {"iteration": 2})
    ckpt, meta, state = load_checkpoint(tmp_path)
    assert ckpt.name == "iter_000002" and meta["iteration"] == 2 and torch.equal(state["x"], torch.zeros(2))
    assert load_checkpoint(root / "latest")[0] == ckpt  # the pointer file names the same checkpoint
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_missing_checkpoint_is_one_line(tmp_path):
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path / "nope")
    assert "checkpoint not found" in str(e.value) and "\n" not in str(e.value)
