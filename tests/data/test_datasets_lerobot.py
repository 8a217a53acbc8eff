"""LeRobot v3.0 datasets both ways.

LeRobot-written datasets are built here from the v3.0 layout itself (pyarrow + PyAV), not with
our writer: several episodes per data file and per mp4, several files, a resumed recording
(its episodes appended to later data, video and meta/episodes files), the task text as the
pandas index of meta/tasks.parquet, no seed. Our reader and SFT must take them. And what our
writer writes must follow the same conventions (tasks index, parquet columns in the order of
info.json's features, int fps, quantile stats with frame counts).
"""

import json
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from embodied.data.dataset import DatasetError, EpisodeWriter, read_episodes, read_meta
from embodied.data.lerobot import LeRobotDataset
from embodied.eval.video import write_mp4

ROOT = Path(__file__).resolve().parents[2]
FPS = 15
VKEY = "observation.images.front"
TASKS = ["pick up the red block", "open the drawer"]


def _pandas_index_meta(index_col: str, value_col: str) -> bytes:
    """The pandas metadata that DataFrame({value_col: ...}, index=[texts]).to_parquet() writes."""
    return json.dumps({"index_columns": [index_col], "column_indexes": [],
                       "columns": [{"name": value_col, "field_name": value_col, "pandas_type": "int64",
                                    "numpy_type": "int64", "metadata": None},
                                   {"name": None, "field_name": index_col, "pandas_type": "unicode",
                                    "numpy_type": "object", "metadata": None}],
                       "attributes": {}, "creator": {"library": "pyarrow"}}).encode()


def _frames(first_index: int, n: int, size: int) -> np.ndarray:
    """uint8 [n, size, size, 3]: global frame g is a flat grey of level (g * 9) % 250 with a bright
    corner, so that each frame is recognisable after lossy coding."""
    levels = (np.arange(first_index, first_index + n) * 9) % 250
    frames = np.repeat(levels[:, None, None, None], 3, axis=3).repeat(size, 1).repeat(size, 2).astype(np.uint8)
    frames[:, :4, :4] = 255
    return frames


def build_lerobot_dataset(root: Path, size: int = 32) -> dict:
    """A LeRobot v3.0 dataset of 5 episodes recorded in two sessions.

    Session 1: episodes 0, 1 in data file-000, episode 2 in data file-001; one mp4 (file-000)
    holds all three, back to back. Session 2 (resumed): episodes 3, 4 in data file-002 and mp4
    file-001, with their rows in meta/episodes file-001. Episode 4's task changes after its
    third frame. State [6] and action [6]; no next.*, no seed. Returns the source arrays."""
    lengths, task_of = [6, 9, 7, 5, 8], [0, 1, 0, 1, 1]
    sessions = [{"data": [[0, 1], [2]], "video": 0, "meta": 0}, {"data": [[3, 4]], "video": 1, "meta": 1}]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    rng = np.random.default_rng(0)
    src = [{"state": rng.normal(size=(n, 6)).astype(np.float32), "action": rng.normal(size=(n, 6)).astype(np.float32),
            "images": _frames(int(starts[e]), n, size)} for e, n in enumerate(lengths)]
    file_index = 0
    for session in sessions:
        rows, t0 = [], 0.0
        video_eps = [e for group in session["data"] for e in group]
        for group in session["data"]:
            data: dict[str, list] = {k: [] for k in ("action", "observation.state", "timestamp", "frame_index",
                                                     "episode_index", "index", "task_index")}
            for e in group:
                n = lengths[e]
                data["action"] += list(src[e]["action"])
                data["observation.state"] += list(src[e]["state"])
                data["timestamp"] += list(np.arange(n, dtype=np.float32) / FPS)
                data["frame_index"] += list(range(n))
                data["episode_index"] += [e] * n
                data["index"] += list(range(starts[e], starts[e] + n))
                data["task_index"] += [task_of[e]] * n if e != 4 else [1] * 3 + [0] * (n - 3)  # a task change
                rows.append({"episode_index": e, "tasks": [TASKS[task_of[e]]] if e != 4 else TASKS[::-1], "length": n,
                             "data/chunk_index": 0, "data/file_index": file_index,
                             "dataset_from_index": int(starts[e]), "dataset_to_index": int(starts[e + 1]),
                             f"videos/{VKEY}/chunk_index": 0, f"videos/{VKEY}/file_index": session["video"],
                             f"videos/{VKEY}/from_timestamp": t0, f"videos/{VKEY}/to_timestamp": t0 + n / FPS,
                             "meta/episodes/chunk_index": 0, "meta/episodes/file_index": session["meta"],
                             "stats/action/mean": src[e]["action"].mean(0).tolist()})
                t0 += n / FPS
            table = pa.table({"action": pa.array(data["action"], pa.list_(pa.float32(), 6)),
                              "observation.state": pa.array(data["observation.state"], pa.list_(pa.float32(), 6)),
                              "timestamp": pa.array(data["timestamp"], pa.float32()),
                              **{k: pa.array(data[k], pa.int64()) for k in ("frame_index", "episode_index", "index",
                                                                             "task_index")}})
            path = root / f"data/chunk-000/file-{file_index:03d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            file_index += 1
        write_mp4(root / f"videos/{VKEY}/chunk-000/file-{session['video']:03d}.mp4",
                  np.concatenate([src[e]["images"] for e in video_eps]), fps=FPS, crf=10)
        path = root / f"meta/episodes/chunk-000/file-{session['meta']:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path)
    tasks = pa.table({"task_index": pa.array([0, 1], pa.int64()), "__index_level_0__": pa.array(TASKS)})
    pq.write_table(tasks.replace_schema_metadata({b"pandas": _pandas_index_meta("__index_level_0__", "task_index")}),
                   root / "meta" / "tasks.parquet")
    vec = {"dtype": "float32", "shape": [6], "names": [f"j{i}" for i in range(6)]}
    scalar = lambda dtype: {"dtype": dtype, "shape": [1], "names": None}  # noqa: E731
    info = {"codebase_version": "v3.0", "robot_type": "so100_follower", "total_episodes": 5,
            "total_frames": int(starts[-1]), "total_tasks": 2, "chunks_size": 1000, "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 500, "fps": FPS, "splits": {"train": "0:5"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            "features": {"action": vec, "observation.state": vec,
                         VKEY: {"dtype": "video", "shape": [size, size, 3], "names": ["height", "width", "channels"],
                                "info": {"video.height": size, "video.width": size, "video.codec": "h264",
                                         "video.pix_fmt": "yuv420p", "video.is_depth_map": False,
                                         "video.fps": FPS, "video.channels": 3, "has_audio": False}},
                         "timestamp": scalar("float32"), "frame_index": scalar("int64"),
                         "episode_index": scalar("int64"), "index": scalar("int64"), "task_index": scalar("int64")}}
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    return {"src": src, "lengths": lengths, "task_of": task_of}


def _assert_same_frames(decoded: np.ndarray, source: np.ndarray) -> None:
    """Lossy coding, but every decoded frame must be its own source frame (levels 9 apart)."""
    assert decoded.shape == source.shape
    assert np.abs(decoded.astype(int) - source.astype(int)).max() <= 3


def test_reads_lerobot_written_dataset(tmp_path):
    built = build_lerobot_dataset(tmp_path / "ds")
    meta = read_meta(tmp_path / "ds")
    assert meta["tasks"] == TASKS and [r["episode_index"] for r in meta["episodes"]] == [0, 1, 2, 3, 4]
    episodes = list(read_episodes(tmp_path / "ds"))
    assert len(episodes) == 5
    for e, ep in enumerate(episodes):
        src = built["src"][e]
        assert ep["action"].shape == (built["lengths"][e], 6) and ep["seed"] is None
        np.testing.assert_array_equal(ep["action"].numpy(), src["action"])
        np.testing.assert_array_equal(ep["obs.state"].numpy(), src["state"])
        _assert_same_frames(ep["obs.rgb_front"].numpy(), src["images"])
        assert ep["instruction"] == TASKS[built["task_of"][e]]
    # a subset: episode 3 comes from the resumed session's files
    ds = LeRobotDataset(tmp_path / "ds", chunk_size=3, episodes=[3])
    assert len(ds) == 5 and ds.num_episodes == 1 and ds[0]["instruction"] == TASKS[1]
    np.testing.assert_array_equal(ds[4]["actions"][0].numpy(), built["src"][3]["action"][4])
    assert ds[4]["action_valid"].tolist() == [True, False, False]
    q = np.quantile(built["src"][3]["state"], [0.01, 0.99], axis=0)
    np.testing.assert_allclose(ds.stats["state"]["q01"].numpy(), q[0], rtol=1e-6)
    np.testing.assert_allclose(ds.stats["state"]["q99"].numpy(), q[1], rtol=1e-6)
    _assert_same_frames(ds[2]["rgb_front"].numpy()[None], built["src"][3]["images"][2:3])
    ds = LeRobotDataset(tmp_path / "ds", episodes=[4])  # its task changes after frame 3, as LeRobot allows
    assert [ds[i]["instruction"] for i in range(len(ds))] == [TASKS[1]] * 3 + [TASKS[0]] * 5
    with pytest.raises(ValueError, match=r"episodes: 7 is not an episode index \(allowed 0..4\)"):
        LeRobotDataset(tmp_path / "ds", episodes=[7])
    # cameras: only those are decoded; one the dataset lacks is named
    ds = LeRobotDataset(tmp_path / "ds", episodes=[4], cameras=[])
    assert ds.cameras == [] and not any(k.startswith("rgb_") for k in ds[0])
    with pytest.raises(DatasetError, match="no camera 'wrist'; it records front"):
        LeRobotDataset(tmp_path / "ds", episodes=[4], cameras=["wrist"])


def test_lerobot_layout_errors_name_the_file(tmp_path):
    build_lerobot_dataset(tmp_path / "ds")
    rows_file = tmp_path / "ds" / "meta/episodes/chunk-000/file-001.parquet"
    rows = pq.read_table(rows_file).to_pylist()
    rows[0][f"videos/{VKEY}/from_timestamp"] += 0.5 / FPS  # between two frames
    pq.write_table(pa.Table.from_pylist(rows), rows_file)
    with pytest.raises(DatasetError, match=r"file-001.mp4: no frame at") as e:
        list(read_episodes(tmp_path / "ds", episodes=[3]))
    assert "\n" not in str(e.value)
    rows_file.unlink()  # the resumed session's episode rows are gone
    with pytest.raises(DatasetError, match=r"meta/episodes lacks episode 3 \(2 of the 5"):
        read_meta(tmp_path / "ds")


def test_sft_on_lerobot_written_dataset(tmp_path):
    """A few SFT steps of the tiny flow VLA straight from the LeRobot-written dataset (state and
    action widths 6, taken from the data)."""
    from embodied.cli import main
    from policies.base import Policy

    build_lerobot_dataset(tmp_path / "ds")
    run = tmp_path / "run"
    code = main(["sft", str(ROOT / "configs" / "sft" / "sft_reach_flow.yaml"), f"dataset={tmp_path / 'ds'}",
                 f"run_dir={run}", "cameras=[front]", "image_size=32", "steps=3", "batch_size=4",
                 "warmup_steps=1", "eval_every=0", "eval_episodes=0", "save_every=0"])
    assert code == 0
    policy = Policy.from_pretrained(run / "final")
    obs = {"rgb_front": torch.zeros(2, 32, 32, 3, dtype=torch.uint8), "state": torch.zeros(2, 6),
           "instruction": TASKS}
    with torch.no_grad():
        assert policy.act(obs, deterministic=True).actions.shape[-1] == 6


def _write_ours(root: Path, fps: float = 20.0, size: int = 16) -> list[dict]:
    writer = EpisodeWriter(root, "Reach", {"control_hz": fps})
    rng = np.random.default_rng(1)
    eps = []
    for e, n in enumerate([5, 7, 4]):
        ep = {"obs.state": torch.from_numpy(rng.normal(size=(n, 9)).astype(np.float32)),
              "obs.rgb_front": torch.from_numpy(_frames(10 * e, n, size)),
              "action": torch.from_numpy(rng.uniform(-1, 1, size=(n, 4)).astype(np.float32)),
              "reward": torch.zeros(n), "success": torch.arange(n) == n - 1}
        writer.add(ep, ["reach the goal", "reach the other goal", "reach the goal"][e], seed=e)
        eps.append(ep)
    return eps


def test_our_tasks_are_the_parquet_index(tmp_path):
    _write_ours(tmp_path / "d")
    table = pq.read_table(tmp_path / "d" / "meta" / "tasks.parquet")
    assert table.schema.pandas_metadata["index_columns"] == ["task"]
    assert table["task"].to_pylist() == ["reach the goal", "reach the other goal"]
    assert table["task_index"].to_pylist() == [0, 1]
    assert [e["instruction"] for e in read_episodes(tmp_path / "d")] == ["reach the goal", "reach the other goal",
                                                                        "reach the goal"]
    pd = pytest.importorskip("pandas")
    df = pd.read_parquet(tmp_path / "d" / "meta" / "tasks.parquet")
    assert list(df.index) == ["reach the goal", "reach the other goal"] and list(df["task_index"]) == [0, 1]


def test_our_parquet_columns_follow_the_features(tmp_path):
    """LeRobot casts each data file to info.json's features (a subset load did and failed)."""
    _write_ours(tmp_path / "d")
    info = json.loads((tmp_path / "d" / "meta" / "info.json").read_text())
    assert info["fps"] == 20 and isinstance(info["fps"], int)
    non_video = [k for k, f in info["features"].items() if f["dtype"] != "video"]
    for f in sorted((tmp_path / "d" / "data").rglob("*.parquet")):
        assert pq.read_schema(f).names == non_video
    assert info["features"][f"{VKEY}"]["info"]["video.is_depth_map"] is False
    ds = LeRobotDataset(tmp_path / "d", chunk_size=2, episodes=[1])
    assert len(ds) == 7 and ds[0]["instruction"] == "reach the other goal"


def test_our_stats_have_quantiles_and_frame_counts(tmp_path):
    eps = _write_ours(tmp_path / "d")
    stats = json.loads((tmp_path / "d" / "meta" / "stats.json").read_text())
    frames = sum(len(e["action"]) for e in eps)
    assert stats[VKEY]["count"] == [frames] and stats["action"]["count"] == [frames]
    for name in ("action", "observation.state", VKEY, "timestamp", "index", "next.done"):
        for q in ("q01", "q10", "q50", "q90", "q99"):
            assert q in stats[name], (name, q)
    assert np.asarray(stats[VKEY]["q99"]).shape == (3, 1, 1)
    actions = np.concatenate([e["action"].numpy() for e in eps])
    np.testing.assert_allclose(stats["action"]["mean"], actions.mean(0), atol=1e-6)
    q = np.asarray(stats["action"]["q01"])
    assert np.all(q >= actions.min(0) - 1e-6) and np.all(q <= np.quantile(actions, 0.5, axis=0))
    # per-episode exact, averaged over episodes by frame count
    per_ep = [np.quantile(e["action"].numpy(), 0.99, axis=0) for e in eps]
    expect = sum(p * len(e["action"]) for p, e in zip(per_ep, eps)) / frames
    np.testing.assert_allclose(stats["action"]["q99"], expect, atol=1e-6)


def test_fractional_fps_is_exact_or_refused(tmp_path):
    _write_ours(tmp_path / "d", fps=12.5)
    info = json.loads((tmp_path / "d" / "meta" / "info.json").read_text())
    assert info["fps"] == 12.5
    video = next((tmp_path / "d" / "videos").rglob("*.mp4"))
    with av.open(str(video)) as c:
        s = c.streams.video[0]
        times = [float(f.pts * s.time_base) for f in c.decode(s)]
    np.testing.assert_allclose(times, np.arange(len(times)) / 12.5, atol=1e-6)
    assert len(list(read_episodes(tmp_path / "d"))) == 3
    with pytest.raises(DatasetError, match=r"control_hz .*not an exact frame rate") as e:
        EpisodeWriter(tmp_path / "bad", "Reach", {"control_hz": 1 / 3.14159})
    assert "\n" not in str(e.value) and not (tmp_path / "bad").exists()


def test_appending_keeps_the_stats(tmp_path):
    """A new writer on an existing dataset continues its stats (quantiles included) as one writer
    would; an image count written as pixels (before the fix) becomes frames."""
    eps = _write_ours(tmp_path / "one")
    _write_ours(tmp_path / "two")
    stats_path = tmp_path / "two" / "meta" / "stats.json"
    old = json.loads(stats_path.read_text())
    old[VKEY]["count"] = [old[VKEY]["count"][0] * 16 * 16]  # pixels, as before the fix
    stats_path.write_text(json.dumps(old))
    for root in ("one", "two"):
        EpisodeWriter(tmp_path / root, "Reach", {"control_hz": 20.0}).add(eps[0], "reach the goal", seed=9)
    one, two = (json.loads((tmp_path / r / "meta" / "stats.json").read_text()) for r in ("one", "two"))
    assert one[VKEY]["count"] == two[VKEY]["count"] == [sum(len(e["action"]) for e in eps) + len(eps[0]["action"])]
    for name in ("action", VKEY):
        for k in ("mean", "std", "q01", "q99"):
            np.testing.assert_allclose(one[name][k], two[name][k], atol=1e-9)
