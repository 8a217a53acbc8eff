"""`embodied collect`: expert demonstrations on disk, readable, safe to interrupt."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from embodied.collect import collect_demos
from embodied.dataset import DatasetError, read_episodes, read_meta

ROOT = Path(__file__).resolve().parent.parent


def test_collect_and_read_back(tmp_path):
    summary = collect_demos("PushCube", 6, tmp_path / "d", seed=3, num_envs=4)
    assert summary["episodes"] == 6
    meta = read_meta(tmp_path / "d")
    assert meta["task"] == "PushCube" and len(meta["episodes"]) == 6
    seeds = [e["seed"] for e in meta["episodes"]]
    assert len(set(seeds)) == 6
    for ep, entry in zip(read_episodes(tmp_path / "d"), meta["episodes"]):
        L = entry["length"]
        assert ep["action"].shape == (L, 4) and ep["obs.privileged"].shape[0] == L
        assert ep["success"][-1] and ep["instruction"].startswith("push the")
        assert ep["action"].abs().max() <= 1.0


def test_collect_rgb_images_are_uint8(tmp_path):
    collect_demos("Reach", 2, tmp_path / "d", obs_mode="rgb", image_size=32, num_envs=2)
    ep = next(read_episodes(tmp_path / "d"))
    assert ep["obs.rgb_front"].dtype == torch.uint8 and ep["obs.rgb_front"].shape[1:] == (32, 32, 3)


def test_interrupted_collection_keeps_finished_episodes(tmp_path):
    out = tmp_path / "d"
    cmd = [sys.executable, "-m", "embodied.cli", "collect", "PushCube", "--episodes", "400", "--out", str(out),
           "--num-envs", "8"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if len(json.loads((out / "meta.json").read_text())["episodes"]) >= 5:
                break
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    meta = read_meta(out)
    assert 5 <= len(meta["episodes"]) < 400
    assert len(list(read_episodes(out))) == len(meta["episodes"])


def test_corrupt_dataset_is_one_line_error(tmp_path):
    collect_demos("Reach", 1, tmp_path / "d", num_envs=1)
    f = next((tmp_path / "d" / "episodes").glob("*.safetensors"))
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(DatasetError, match="unreadable episode"):
        list(read_episodes(tmp_path / "d"))
    (tmp_path / "d" / "meta.json").write_text("{not json")
    with pytest.raises(DatasetError, match="corrupt") as e:
        read_meta(tmp_path / "d")
    assert "\n" not in str(e.value)
