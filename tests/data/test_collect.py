"""`embodied collect`: expert demonstrations on disk, readable, safe to interrupt."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.data.collect import collect_demos
from embodied.data.dataset import DatasetError, read_episodes, read_meta
from sims.vecenv import EnvError

ROOT = Path(__file__).resolve().parents[2]


def test_collect_and_read_back(tmp_path):
    summary = collect_demos("PushCube", 6, tmp_path / "d", seed=3, num_envs=4)
    assert summary["episodes"] == 6
    meta = read_meta(tmp_path / "d")
    assert meta["embodied"]["task"] == "PushCube" and len(meta["episodes"]) == 6
    assert meta["codebase_version"] == "v3.0" and meta["total_frames"] == sum(e["length"] for e in meta["episodes"])
    seeds = [e["seed"] for e in meta["episodes"]]
    assert len(set(seeds)) == 6
    for ep, entry in zip(read_episodes(tmp_path / "d"), meta["episodes"]):
        L = entry["length"]
        assert ep["action"].shape == (L, 4) and ep["obs.privileged"].shape[0] == L
        assert ep["success"][-1] and ep["instruction"].startswith("push the")
        assert ep["action"].abs().max() <= 1.0
    # adding to it: from the same seeds it would repeat its episodes, so only past them
    last = max(seeds)
    with pytest.raises(DatasetError, match=rf"--seed: 3, but .* seeds up to {last}, .* --seed {last + 1} or more"):
        collect_demos("PushCube", 2, tmp_path / "d", seed=3, num_envs=2)
    collect_demos("PushCube", 2, tmp_path / "d", seed=last + 1, num_envs=2)
    assert len(set(e["seed"] for e in read_meta(tmp_path / "d")["episodes"])) == 8


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
            if json.loads((out / "meta" / "info.json").read_text())["total_episodes"] >= 5:
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
    f = next((tmp_path / "d" / "data").rglob("*.parquet"))
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(DatasetError, match="unreadable parquet") as e:
        list(read_episodes(tmp_path / "d"))
    assert "\n" not in str(e.value)
    (tmp_path / "d" / "meta" / "info.json").write_text("{not json")
    with pytest.raises(DatasetError, match="corrupt") as e:
        read_meta(tmp_path / "d")
    assert "\n" not in str(e.value)


def test_layout_is_lerobot_v3_readable_without_our_loader(tmp_path):
    """Read what `collect` wrote with pyarrow and PyAV alone."""
    import av
    import numpy as np
    import pyarrow.parquet as pq

    root = tmp_path / "d"
    collect_demos("PushCube", 3, root, obs_mode="rgb", image_size=32, num_envs=3)
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3
    feats = info["features"]
    assert feats["observation.images.front"]["dtype"] == "video"
    assert feats["observation.state"]["shape"] == [9] and feats["action"]["shape"] == [4]
    episodes = pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    tasks = pq.read_table(root / "meta" / "tasks.parquet")
    # the task text is the DataFrame index (LeRobot reads tasks.iloc[task_index].name)
    index_col = tasks.schema.pandas_metadata["index_columns"][0]
    texts = dict(zip(tasks["task_index"].to_pylist(), tasks[index_col].to_pylist()))
    stats = json.loads((root / "meta" / "stats.json").read_text())
    assert np.array(stats["observation.images.front"]["mean"]).shape == (3, 1, 1)
    frame_index = 0
    for ep in episodes:
        data = pq.read_table(root / info["data_path"].format(chunk_index=ep["data/chunk_index"],
                                                            file_index=ep["data/file_index"])).to_pydict()
        assert data["frame_index"] == list(range(ep["length"]))
        assert data["index"] == list(range(ep["dataset_from_index"], ep["dataset_to_index"]))
        assert data["index"][0] == frame_index
        frame_index = ep["dataset_to_index"]
        assert texts[data["task_index"][0]] == ep["tasks"][0]
        assert len(data["action"][0]) == 4 and data["next.done"][-1] and data["next.success"][-1]
        video = root / info["video_path"].format(video_key="observation.images.front",
                                                 chunk_index=ep["videos/observation.images.front/chunk_index"],
                                                 file_index=ep["videos/observation.images.front/file_index"])
        with av.open(str(video)) as c:
            frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        assert len(frames) == ep["length"] and frames[0].shape == (32, 32, 3)


def test_truncated_video_is_clear_error(tmp_path):
    root = tmp_path / "d"
    collect_demos("Reach", 1, root, obs_mode="rgb", image_size=32, num_envs=1)
    video = next((root / "videos").rglob("*.mp4"))
    video.write_bytes(video.read_bytes()[:200])
    with pytest.raises(DatasetError) as e:
        list(read_episodes(root))
    assert str(video) in str(e.value) and "\n" not in str(e.value)


def test_chunked_torch_dataset(tmp_path):
    from embodied.data.lerobot import LeRobotDataset

    root = tmp_path / "d"
    collect_demos("PushCube", 2, root, obs_mode="rgb", image_size=32, num_envs=2)
    ds = LeRobotDataset(root, chunk_size=4)
    meta = read_meta(root)
    assert len(ds) == meta["total_frames"] and ds.num_episodes == 2
    first_len = meta["episodes"][0]["length"]
    last = ds[first_len - 1]  # last frame of episode 0: one real action, three repeats
    assert last["action_valid"].tolist() == [True, False, False, False]
    assert torch.equal(last["actions"][1], last["actions"][0])
    item = ds[0]
    assert item["rgb_front"].shape == (32, 32, 3) and item["rgb_front"].dtype == torch.uint8
    assert item["actions"].shape == (4, 4) and item["instruction"].startswith("push the")
    ref = next(read_episodes(root))
    torch.testing.assert_close(item["actions"], ref["action"][:4].float())


def test_sft_command_end_to_end(tmp_path):
    """collect -> LeRobot dataset -> `embodied sft` -> a checkpoint that loads and acts."""
    from embodied.cli import main
    from policies.base import Policy

    collect_demos("Reach", 4, tmp_path / "d", obs_mode="rgb", num_envs=4, cameras=["front", "wrist"], noise=0.3)
    run = tmp_path / "run"
    code = main(["sft", str(ROOT / "configs" / "sft" / "sft_reach_flow.yaml"), f"dataset={tmp_path / 'd'}",
                 f"run_dir={run}", "steps=6", "batch_size=8", "warmup_steps=2", "eval_every=0",
                 "eval_episodes=2", "save_every=0"])
    assert code == 0
    policy = Policy.from_pretrained(run / "final")
    obs = {"rgb_front": torch.zeros(2, 64, 64, 3, dtype=torch.uint8), "state": torch.zeros(2, 9),
           "rgb_wrist": torch.zeros(2, 64, 64, 3, dtype=torch.uint8),
           "instruction": ["move the gripper to the target"] * 2}
    with torch.no_grad():
        assert policy.act(obs, deterministic=True).actions.shape == (2, 1, 4)  # execute_steps: 1 of K = 4


def test_collect_cameras_and_dart_noise(tmp_path):
    """--cameras records one video per camera; --noise executes noisy actions but labels every
    frame with the clean expert action; the same seed gives the same dataset."""
    import numpy as np

    from sims.registry import expert_for

    kw = dict(obs_mode="rgb", image_size=32, num_envs=3, cameras=["front", "wrist"])
    collect_demos("Reach", 3, tmp_path / "noisy", seed=7, noise=0.3, **kw)
    collect_demos("Reach", 3, tmp_path / "again", seed=7, noise=0.3, **kw)
    collect_demos("Reach", 3, tmp_path / "clean", seed=7, **kw)
    info = read_meta(tmp_path / "noisy")
    assert info["features"]["observation.images.wrist"]["dtype"] == "video"
    assert info["embodied"]["spec"]["expert_noise_std"] == 0.3
    expert = expert_for("Reach")
    noisy, again, clean = ({e["seed"]: e for e in read_episodes(tmp_path / d)} for d in ("noisy", "again", "clean"))
    assert noisy.keys() == again.keys() == clean.keys()  # the same seeds (episodes end in another order)
    for seed, ep in noisy.items():
        ep2, ref = again[seed], clean[seed]
        assert ep["obs.rgb_wrist"].shape[1:] == (32, 32, 3)
        assert (ep["obs.rgb_front"].float() - ep["obs.rgb_wrist"].float()).abs().mean() > 10
        # the label is the expert's action in the state the noisy actions led to
        np.testing.assert_allclose(ep["action"].numpy(), expert(ep["obs.privileged"].numpy()), atol=1e-5)
        torch.testing.assert_close(ep["obs.privileged"], ep2["obs.privileged"], rtol=0, atol=0)
        torch.testing.assert_close(ep["obs.privileged"][0], ref["obs.privileged"][0])  # same start
    # the noise moved the gripper off the expert's path
    seed = min(noisy)
    n = min(len(noisy[seed]["action"]), len(clean[seed]["action"]))
    off = (noisy[seed]["obs.state"][1:n, :3] - clean[seed]["obs.state"][1:n, :3]).norm(dim=1)
    assert off.max() > 0.005


def test_collect_bad_options_are_one_line_errors(tmp_path):
    from embodied.cli import main
    from sims.vecenv import EnvError

    for kwargs, words in [({"obs_mode": "rgb", "cameras": ["front", "top"]}, ("--cameras", "front, wrist")),
                          ({"cameras": ["wrist"]}, ("--cameras", "--obs-mode rgb")),
                          ({"noise": -0.1}, ("--noise", ">= 0")),
                          ({"noise": float("nan")}, ("--noise",))]:
        with pytest.raises(EnvError) as e:
            collect_demos("Reach", 1, tmp_path / "d", **kwargs)
        assert all(w in str(e.value) for w in words) and "\n" not in str(e.value), str(e.value)
    assert main(["collect", "Reach", "--episodes", "1", "--out", str(tmp_path / "d"), "--obs-mode", "rgb",
                 "--cameras", "front,top"]) == 2
    assert not (tmp_path / "d").exists()


def test_dataset_video_encoding_is_repeatable(tmp_path):
    """The same frames encode to the same bytes, call after call, so that a collection (and the
    SFT trained on it) can be rebuilt bit for bit. With x264's macroblock-tree rate control on,
    these noisy moving frames gave a different file in about 1 of 10 encodings."""
    from embodied.eval.video import write_mp4

    rng = np.random.default_rng(0)
    x = np.linspace(0.0, 1.0, 64)
    frames = np.zeros((50, 64, 64, 3))
    for t in range(50):
        frames[t, ..., 0] = 0.5 + 0.5 * np.sin(8 * x[None] + 0.2 * t)
        frames[t, ..., 1] = 0.5 + 0.5 * np.cos(6 * x[:, None] - 0.15 * t)
        frames[t, 20:32, 10 + t // 2:22 + t // 2] = (1.0, 0.2, 0.1)  # a moving block
    frames = (np.clip(frames + rng.normal(0, 0.02, frames.shape), 0, 1) * 255).astype(np.uint8)
    encoded = {write_mp4(tmp_path / f"{i}.mp4", frames, crf=10).read_bytes() for i in range(40)}
    assert len(encoded) == 1


def test_expert_speed_scales_the_demonstrated_motion(tmp_path):
    """expert_speed < 1: a slower demonstrator; the recorded motion (not the gripper command) is
    the expert's scaled, and the dataset says so."""
    fast = next(read_episodes(collect_demos("Reach", 1, tmp_path / "fast", seed=5, num_envs=1)["out"]))
    slow = next(read_episodes(collect_demos("Reach", 1, tmp_path / "slow", seed=5, num_envs=1,
                                            expert_speed=0.5)["out"]))
    # the first step starts from the same state: the label is half the expert's, the gripper the same
    torch.testing.assert_close(slow["action"][0, :3], 0.5 * fast["action"][0, :3])
    assert slow["action"][0, 3] == fast["action"][0, 3]
    assert len(slow["action"]) > len(fast["action"])  # it takes longer to reach the goal
    assert read_meta(tmp_path / "slow")["embodied"]["spec"]["expert_speed"] == 0.5
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(EnvError, match="expert_speed must be in"):
            collect_demos("Reach", 1, tmp_path / "bad", expert_speed=bad)
    assert not (tmp_path / "bad").exists()


def test_balanced_shares_count_what_a_resumed_collection_holds():
    """--balanced splits the total (episodes already in --out plus the new ones) evenly; a resumed
    collection tops up the tasks the stopped one left short (the MetaWorld run: tests/sims/test_metaworld.py)."""
    from embodied.data.collect import _shares

    q = _shares(["reach", "push", "reach", "push", "peg"], 6, [{"tasks": ["reach"]}] * 3)
    assert q == {"rows": ["reach", "push", "reach", "push", "peg"], "left": {"reach": 0, "push": 3, "peg": 3}}
    assert _shares(["a", "b"], 5, [])["left"] == {"a": 3, "b": 2}

