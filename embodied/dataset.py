"""Episode datasets in the LeRobotDataset v3.0 layout (parquet + mp4 + JSON).

  meta/info.json                                   version, fps, features, totals, path templates
  meta/stats.json                                  min / max / mean / std / count per feature
  meta/tasks.parquet                               task_index, task (the instruction text)
  meta/episodes/chunk-000/file-000.parquet         one row per episode: length, tasks, offsets,
                                                   file indices, video timestamps, seed, success
  data/chunk-{c:03d}/file-{f:03d}.parquet          one row per frame (one episode per file)
  videos/observation.images.<cam>/chunk-{c:03d}/file-{f:03d}.mp4   H.264, one episode per file

Frame columns: observation.state, observation.environment_state (privileged
state), action, next.reward, next.success, next.done, timestamp, frame_index,
episode_index, index, task_index. Images are not in the parquet: they are the
mp4 frames at `timestamp`.

Writing is atomic per episode: the episode's parquet and mp4 files are written
under temporary names and renamed, then the metadata is replaced file by file,
meta/info.json last. `total_episodes` in info.json is the commit point: readers
ignore any episode beyond it, so a collection killed at any moment leaves a valid
dataset of its finished episodes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from embodied.video import write_mp4

VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
# Our episode keys (what EpisodeWriter.add takes) -> LeRobot feature names.
FEATURE_NAMES = {"obs.state": "observation.state", "obs.privileged": "observation.environment_state",
                 "action": "action", "reward": "next.reward", "success": "next.success"}
IMAGE_PREFIX = "obs.rgb_"


class DatasetError(ValueError):
    """A missing, foreign or corrupt dataset; the message is one line."""


def _atomic_bytes(path: Path, write: Any) -> None:
    """Call write(tmp_path), then rename tmp_path onto path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def _video_key(camera: str) -> str:
    return f"observation.images.{camera}"


class EpisodeWriter:
    """Appends episodes to a LeRobot v3 dataset directory (new, or one of the same task)."""

    def __init__(self, root: str | Path, task: str, spec: dict[str, Any], crf: int = 10):
        self.root, self.crf = Path(root), crf
        self.fps = float(spec.get("control_hz", 20.0))
        if (self.root / "meta" / "info.json").exists():
            self.info = read_info(self.root)
            if self.info.get("embodied", {}).get("task") != task:
                raise DatasetError(f"{self.root}: holds task {self.info.get('embodied', {}).get('task')}, not {task}")
            self.episodes = _read_episodes_table(self.root, self.info["total_episodes"])
            self.tasks = _read_tasks(self.root)
            self.stats = _RunningStats.from_json(json.loads((self.root / "meta" / "stats.json").read_text()))
        else:
            self.info = {"codebase_version": VERSION, "robot_type": "embodied-floating-gripper",
                         "total_episodes": 0, "total_frames": 0, "total_tasks": 0, "chunks_size": CHUNKS_SIZE,
                         "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "fps": self.fps,
                         "splits": {}, "data_path": DATA_PATH, "video_path": VIDEO_PATH, "features": {},
                         "embodied": {"task": task, "spec": spec}}
            self.episodes, self.tasks, self.stats = [], [], _RunningStats()

    def add(self, episode: dict[str, torch.Tensor], instruction: str, seed: int | None) -> int:
        """Write one episode of tensors [L, ...] ("obs.<key>", "action", "reward", "success")."""
        index = self.info["total_episodes"]
        length = int(episode["action"].shape[0])
        start = self.info["total_frames"]
        if instruction not in self.tasks:
            self.tasks.append(instruction)
        task_index = self.tasks.index(instruction)
        chunk, file = divmod(index, CHUNKS_SIZE)
        timestamps = np.arange(length, dtype=np.float32) / np.float32(self.fps)

        columns: dict[str, pa.Array] = {}
        features: dict[str, Any] = {}
        for key, name in FEATURE_NAMES.items():
            if key not in episode:
                continue
            x = episode[key].detach().cpu().numpy()
            x = x.astype(np.float32) if x.dtype != np.bool_ else x
            columns[name] = pa.array(list(x)) if x.ndim == 2 else pa.array(x)
            features[name] = {"dtype": "bool" if x.dtype == np.bool_ else "float32",
                              "shape": [int(x.shape[1])] if x.ndim == 2 else [1], "names": None}
            self.stats.update(name, x.reshape(length, -1).astype(np.float64))
        done = np.zeros(length, bool)
        done[-1] = True
        columns["next.done"] = pa.array(done)
        for name, values, dtype in (("timestamp", timestamps, "float32"),
                                    ("frame_index", np.arange(length), "int64"),
                                    ("episode_index", np.full(length, index), "int64"),
                                    ("index", np.arange(start, start + length), "int64"),
                                    ("task_index", np.full(length, task_index), "int64")):
            columns[name] = pa.array(values.astype(dtype))
            features[name] = {"dtype": dtype, "shape": [1], "names": None}
        features["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
        data_file = self.root / DATA_PATH.format(chunk_index=chunk, file_index=file)
        _atomic_bytes(data_file, lambda p: pq.write_table(pa.table(columns), p))

        row: dict[str, Any] = {
            "episode_index": index, "tasks": [instruction], "length": length,
            "data/chunk_index": chunk, "data/file_index": file,
            "dataset_from_index": start, "dataset_to_index": start + length,
            "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
            "seed": -1 if seed is None else int(seed), "success": bool(episode["success"].any()),
        }
        for key in sorted(k for k in episode if k.startswith(IMAGE_PREFIX)):
            frames = episode[key].detach().cpu().numpy()  # uint8 [L, H, W, 3]
            vkey = _video_key(key[len(IMAGE_PREFIX):])
            path = self.root / VIDEO_PATH.format(video_key=vkey, chunk_index=chunk, file_index=file)
            write_mp4(path, frames, fps=self.fps, crf=self.crf)
            h, w = frames.shape[1:3]
            features[vkey] = {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"],
                              "info": {"video.height": h, "video.width": w, "video.codec": "h264",
                                       "video.pix_fmt": "yuv420p", "video.fps": self.fps, "video.channels": 3,
                                       "has_audio": False}}
            self.stats.update(vkey, frames.reshape(-1, 3).astype(np.float64) / 255.0, image=True)
            row.update({f"videos/{vkey}/chunk_index": chunk, f"videos/{vkey}/file_index": file,
                        f"videos/{vkey}/from_timestamp": 0.0, f"videos/{vkey}/to_timestamp": length / self.fps})
        self.episodes.append(row)

        # Metadata, info.json last: it commits the episode.
        meta = self.root / "meta"
        _atomic_bytes(meta / "stats.json", lambda p: p.write_text(json.dumps(self.stats.to_json(), indent=1)))
        tasks = pa.table({"task_index": pa.array(np.arange(len(self.tasks), dtype=np.int64)),
                          "task": pa.array(self.tasks)})
        _atomic_bytes(meta / "tasks.parquet", lambda p: pq.write_table(tasks, p))
        _atomic_bytes(self.root / EPISODES_PATH, lambda p: pq.write_table(pa.Table.from_pylist(self.episodes), p))
        self.info["features"].update(features)
        self.info.update(total_episodes=index + 1, total_frames=start + length, total_tasks=len(self.tasks),
                         splits={"train": f"0:{index + 1}"})
        _atomic_bytes(meta / "info.json", lambda p: p.write_text(json.dumps(self.info, indent=1)))
        return index


class _RunningStats:
    """Per-feature count, sum, sum of squares, min and max (images: per channel)."""

    def __init__(self) -> None:
        self.acc: dict[str, dict[str, Any]] = {}

    def update(self, name: str, x: np.ndarray, image: bool = False) -> None:
        """x: [n, D] float64 values of feature `name`."""
        a = self.acc.setdefault(name, {"count": 0, "sum": 0.0, "sumsq": 0.0, "min": None, "max": None,
                                       "image": image})
        a["count"] += x.shape[0]
        a["sum"] = a["sum"] + x.sum(0)
        a["sumsq"] = a["sumsq"] + (x * x).sum(0)
        a["min"] = x.min(0) if a["min"] is None else np.minimum(a["min"], x.min(0))
        a["max"] = x.max(0) if a["max"] is None else np.maximum(a["max"], x.max(0))

    def to_json(self) -> dict[str, Any]:
        out = {}
        for name, a in self.acc.items():
            mean = a["sum"] / a["count"]
            std = np.sqrt(np.maximum(a["sumsq"] / a["count"] - mean**2, 0.0))
            shape = (-1, 1, 1) if a["image"] else (-1,)  # LeRobot keeps image stats as [3, 1, 1]
            out[name] = {k: np.asarray(v).reshape(shape).tolist() for k, v in
                         (("mean", mean), ("std", std), ("min", a["min"]), ("max", a["max"]))}
            out[name]["count"] = [int(a["count"])]
        return out

    @classmethod
    def from_json(cls, stats: dict[str, Any]) -> "_RunningStats":
        self = cls()
        for name, s in stats.items():
            image = np.asarray(s["mean"]).ndim == 3
            mean, std = np.asarray(s["mean"]).reshape(-1), np.asarray(s["std"]).reshape(-1)
            n = int(s["count"][0])
            self.acc[name] = {"count": n, "sum": mean * n, "sumsq": (std**2 + mean**2) * n,
                              "min": np.asarray(s["min"]).reshape(-1), "max": np.asarray(s["max"]).reshape(-1),
                              "image": image}
        return self


def read_info(root: str | Path) -> dict[str, Any]:
    root = Path(root)
    try:
        info = json.loads((root / "meta" / "info.json").read_text())
    except FileNotFoundError:
        raise DatasetError(f"{root}: not a dataset (no meta/info.json)") from None
    except json.JSONDecodeError as e:
        raise DatasetError(f"{root}/meta/info.json: corrupt ({e.msg} at line {e.lineno})") from None
    if info.get("codebase_version") != VERSION:
        raise DatasetError(f"{root}: codebase_version {info.get('codebase_version')!r}, expected {VERSION!r}")
    return info


def _read_table(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing") from None
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{path}: unreadable parquet ({str(e).splitlines()[0][:120]})") from None


def _read_episodes_table(root: Path, total: int) -> list[dict[str, Any]]:
    rows = _read_table(root / EPISODES_PATH).to_pylist()
    rows = sorted(rows, key=lambda r: r["episode_index"])[:total]  # rows past the commit point are ignored
    if len(rows) < total:
        raise DatasetError(f"{root}: meta/episodes lists {len(rows)} episodes, info.json says {total}")
    return rows


def _read_tasks(root: Path) -> list[str]:
    table = _read_table(root / "meta" / "tasks.parquet").to_pydict()
    return [t for _, t in sorted(zip(table["task_index"], table["task"]))]


def read_meta(root: str | Path) -> dict[str, Any]:
    """info.json plus the committed episode rows under "episodes" and the task list under "tasks"."""
    root = Path(root)
    info = read_info(root)
    return {**info, "episodes": _read_episodes_table(root, info["total_episodes"]), "tasks": _read_tasks(root)}


def decode_video(path: Path, expected_frames: int) -> np.ndarray:
    """uint8 [L, H, W, 3] frames of an mp4; DatasetError if unreadable or of the wrong length."""
    try:
        with av.open(str(path)) as container:
            frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing") from None
    except (av.error.FFmpegError, ValueError) as e:
        raise DatasetError(f"{path}: unreadable video ({type(e).__name__})") from None
    if frames.shape[0] != expected_frames:
        raise DatasetError(f"{path}: {frames.shape[0]} frames, the episode has {expected_frames}")
    return frames


def read_episodes(root: str | Path) -> Iterator[dict[str, Any]]:
    """Yield each committed episode as tensors [L, ...] with our keys plus 'instruction' and 'seed'."""
    root = Path(root)
    meta = read_meta(root)
    inverse = {v: k for k, v in FEATURE_NAMES.items()}
    cameras = [k[len("observation.images."):] for k, f in meta["features"].items() if f["dtype"] == "video"]
    for row in meta["episodes"]:
        path = root / DATA_PATH.format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"])
        table = _read_table(path)
        if table.num_rows != row["length"]:
            raise DatasetError(f"{path}: {table.num_rows} frames, meta/episodes says {row['length']}")
        episode: dict[str, Any] = {}
        for name in table.column_names:
            if name in inverse:
                episode[inverse[name]] = torch.from_numpy(np.array(table[name].to_pylist()))
        for cam in cameras:
            vkey = _video_key(cam)
            vpath = root / VIDEO_PATH.format(video_key=vkey, chunk_index=row[f"videos/{vkey}/chunk_index"],
                                             file_index=row[f"videos/{vkey}/file_index"])
            episode[IMAGE_PREFIX + cam] = torch.from_numpy(decode_video(vpath, row["length"]))
        episode["instruction"] = row["tasks"][0]
        episode["seed"] = row["seed"]
        yield episode
