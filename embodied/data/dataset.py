"""Episode datasets in the LeRobotDataset v3.0 layout (parquet + mp4 + JSON): the writer.

  meta/info.json                                   version, fps, features, totals, path templates
  meta/stats.json                                  min / max / mean / std / count / q01..q99 per feature
  meta/tasks.parquet                               task_index column, the task text as the index
  meta/episodes/chunk-000/file-000.parquet         one row per episode: length, tasks, offsets,
                                                   file indices, video timestamps, seed, success
  data/chunk-{c:03d}/file-{f:03d}.parquet          one row per frame (we write one episode per file)
  videos/observation.images.<cam>/chunk-{c:03d}/file-{f:03d}.mp4   H.264, one episode per file

Frame columns, in the order of info.json's features: observation.state,
observation.environment_state (privileged state), action, next.reward, next.success,
next.done, timestamp, frame_index, episode_index, index, task_index. Images are not in
the parquet: they are the mp4 frames at `timestamp`.

Writing is atomic per episode: the episode's parquet and mp4 files are written
under temporary names and renamed, then the metadata is replaced file by file,
meta/info.json last. `total_episodes` in info.json is the commit point: readers
ignore any episode beyond it, so a collection killed at any moment leaves a valid
dataset of its finished episodes.

Reading (any v3.0 dataset, LeRobot's too) is embodied/data/read.py; its names are
re-exported here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from embodied.data.layout import (CHUNKS_SIZE, DATA_PATH, EPISODES_PATH, FEATURE_NAMES, IMAGE_PREFIX,  # noqa: F401
                                     TASKS_PATH, VERSION, VIDEO_PATH, DatasetError, info_fps, read_episode_rows,
                                     read_info, read_tasks, tasks_table, video_key)
from embodied.data.read import read_episodes, read_meta  # noqa: F401  (re-exported)
from embodied.data.feature_stats import RunningStats
from embodied.eval.video import video_rate, write_mp4


def _atomic_bytes(path: Path, write: Any) -> None:
    """Call write(tmp_path), then rename tmp_path onto path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def _scalar_feature(dtype: str) -> dict[str, Any]:
    return {"dtype": dtype, "shape": [1], "names": None}


class EpisodeWriter:
    """Appends episodes to a LeRobot v3 dataset directory (new, or one of the same task)."""

    def __init__(self, root: str | Path, task: str, spec: dict[str, Any], crf: int = 10):
        self.root, self.crf = Path(root), crf
        try:
            self.fps = info_fps(spec.get("control_hz", 20.0))
            video_rate(self.fps)
        except ValueError as e:  # one line naming the spec field
            raise DatasetError(f"control_hz (the dataset's fps): {str(e).removeprefix('fps: ')}") from None
        if (self.root / "meta" / "info.json").exists():
            self.info = read_info(self.root)
            if self.info.get("embodied", {}).get("task") != task:
                raise DatasetError(f"{self.root}: holds task {self.info.get('embodied', {}).get('task')}, not {task}")
            self.fps = self.info["fps"]
            self.episodes = read_episode_rows(self.root, self.info["total_episodes"])
            tasks = read_tasks(self.root)
            self.tasks = [tasks[i] for i in sorted(tasks)]
            self.stats = RunningStats.from_json(json.loads((self.root / "meta" / "stats.json").read_text()))
            for a in self.stats.acc.values():  # before the fix an image's count was its pixels, not frames
                if a["image"] and a["count"] > self.info["total_frames"]:
                    scale = self.info["total_frames"] / a["count"]
                    a.update(count=self.info["total_frames"], sum=a["sum"] * scale, sumsq=a["sumsq"] * scale,
                             q=None if a["q"] is None else a["q"] * scale)
        else:
            self.info = {"codebase_version": VERSION, "robot_type": "embodied-floating-gripper",
                         "total_episodes": 0, "total_frames": 0, "total_tasks": 0, "chunks_size": CHUNKS_SIZE,
                         "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "fps": self.fps,
                         "splits": {}, "data_path": DATA_PATH, "video_path": VIDEO_PATH, "features": {},
                         "embodied": {"task": task, "spec": spec}}
            self.episodes, self.tasks, self.stats = [], [], RunningStats()

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

        # Columns and features in one order: LeRobot casts each parquet file to the features' schema.
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
            self.stats.update(name, x.reshape(length, -1).astype(np.float64), length)
        done = np.zeros(length, bool)
        done[-1] = True
        columns["next.done"], features["next.done"] = pa.array(done), _scalar_feature("bool")
        self.stats.update("next.done", done.reshape(length, 1).astype(np.float64), length)
        for name, values, dtype in (("timestamp", timestamps, "float32"),
                                    ("frame_index", np.arange(length), "int64"),
                                    ("episode_index", np.full(length, index), "int64"),
                                    ("index", np.arange(start, start + length), "int64"),
                                    ("task_index", np.full(length, task_index), "int64")):
            columns[name] = pa.array(values.astype(dtype))
            features[name] = _scalar_feature(dtype)
            self.stats.update(name, values.reshape(length, 1).astype(np.float64), length)
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
            vkey = video_key(key[len(IMAGE_PREFIX):])
            path = self.root / VIDEO_PATH.format(video_key=vkey, chunk_index=chunk, file_index=file)
            write_mp4(path, frames, fps=self.fps, crf=self.crf)
            h, w = frames.shape[1:3]
            features[vkey] = {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"],
                              "info": {"video.height": h, "video.width": w, "video.codec": "h264",
                                       "video.pix_fmt": "yuv420p", "video.is_depth_map": False,
                                       "video.fps": self.fps, "video.channels": 3, "has_audio": False}}
            self.stats.update(vkey, frames.reshape(-1, 3).astype(np.float64) / 255.0, length, image=True)
            row.update({f"videos/{vkey}/chunk_index": chunk, f"videos/{vkey}/file_index": file,
                        f"videos/{vkey}/from_timestamp": 0.0, f"videos/{vkey}/to_timestamp": length / self.fps})
        self.episodes.append(row)

        # Metadata, info.json last: it commits the episode.
        meta = self.root / "meta"
        _atomic_bytes(meta / "stats.json", lambda p: p.write_text(json.dumps(self.stats.to_json(), indent=1)))
        _atomic_bytes(self.root / TASKS_PATH, lambda p: pq.write_table(tasks_table(self.tasks), p))
        _atomic_bytes(self.root / EPISODES_PATH, lambda p: pq.write_table(pa.Table.from_pylist(self.episodes), p))
        old = self.info["features"]
        self.info["features"] = {**features, **{k: v for k, v in old.items() if k not in features}}
        self.info.update(total_episodes=index + 1, total_frames=start + length, total_tasks=len(self.tasks),
                         splits={"train": f"0:{index + 1}"})
        _atomic_bytes(meta / "info.json", lambda p: p.write_text(json.dumps(self.info, indent=1)))
        return index
