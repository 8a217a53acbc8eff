"""Reading any LeRobotDataset v3.0 directory: ours, or one that LeRobot wrote.

What a v3.0 dataset may hold, and what this reader follows:
- several episodes per data file and several files: an episode is the rows of
  data/chunk-<data/chunk_index>/file-<data/file_index> whose episode_index is its own
  (dataset_from_index .. dataset_to_index in the global `index` column);
- several episodes per mp4: an episode's frames of camera <key> are those at
  videos/<key>/from_timestamp + each frame's `timestamp` in that camera's file;
- several meta/episodes files (a resumed recording appends episodes to new files);
- no `seed` (None then) and no per-episode `task` column: the task text comes from
  meta/tasks.parquet through each frame's task_index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from embodied.data.layout import (FEATURE_NAMES, IMAGE_PREFIX, TOLERANCE_S, VIDEO_PREFIX, DatasetError,
                                     read_episode_rows, read_info, read_table, read_tasks)


def read_meta(root: str | Path) -> dict[str, Any]:
    """info.json plus the committed episode rows under "episodes" and the task texts (by
    task_index) under "tasks"."""
    root = Path(root)
    info = read_info(root)
    tasks = read_tasks(root)
    return {**info, "episodes": read_episode_rows(root, info["total_episodes"]),
            "tasks": [tasks[i] for i in sorted(tasks)]}


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A frame column as numpy: [n] for scalars, [n, D] for fixed-length lists."""
    col = table[name].combine_chunks()
    if pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type) or pa.types.is_large_list(col.type):
        values = col.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(len(col), -1)
    return col.to_numpy(zero_copy_only=False)


def _our_key(name: str) -> str | None:
    """LeRobot feature name -> our episode key (None: not an episode tensor)."""
    inverse = {v: k for k, v in FEATURE_NAMES.items()}
    if name in inverse:
        return inverse[name]
    if name.startswith("observation.") and not name.startswith(VIDEO_PREFIX):
        return "obs." + name[len("observation."):]
    return None


def decode_frames(path: Path, times: np.ndarray) -> np.ndarray:
    """uint8 [n, H, W, 3]: the frames of an mp4 at `times` [n] (seconds, increasing), each within
    TOLERANCE_S of a frame's presentation time; DatasetError (naming the file) otherwise."""
    import av  # PyAV only where videos are decoded

    frames: list[np.ndarray] = []
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            if times[0] > 0:
                container.seek(int(max(times[0] - 1.0, 0.0) / stream.time_base), stream=stream)
            for frame in container.decode(stream):
                t = float(frame.pts * stream.time_base)
                k = len(frames)
                if t < times[k] - TOLERANCE_S:
                    continue
                if t > times[k] + TOLERANCE_S:
                    break
                frames.append(frame.to_ndarray(format="rgb24"))
                if len(frames) == len(times):
                    break
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing") from None
    except (av.error.FFmpegError, ValueError) as e:
        raise DatasetError(f"{path}: unreadable video ({type(e).__name__})") from None
    if len(frames) < len(times):
        raise DatasetError(f"{path}: no frame at {times[len(frames)]:.4f} s (tolerance {TOLERANCE_S} s); "
                           f"{len(frames)} of {len(times)} frames found")
    return np.stack(frames)


def recorded_cameras(info: dict[str, Any]) -> list[str]:
    """The cameras whose videos a dataset holds (observation.images.<cam>), in info.json's order."""
    return [k[len(VIDEO_PREFIX):] for k, f in info["features"].items()
            if f.get("dtype") == "video" and k.startswith(VIDEO_PREFIX)]


def read_episodes(root: str | Path, episodes: list[int] | None = None,
                  cameras: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Yield each committed episode (or those in `episodes`, in index order) as tensors [L, ...]:
    "obs.<key>" (observation.<key>; obs.privileged for observation.environment_state),
    "obs.rgb_<cam>" uint8 [L, H, W, 3] (of `cameras` only where given; the others are not
    decoded), "action", "reward", "success" where present, plus "frame_tasks" (each frame's
    task text, through task_index), "instruction" (the first frame's) and "seed" (None if not
    recorded)."""
    root = Path(root)
    meta = read_meta(root)
    total = meta["total_episodes"]
    if episodes is not None:
        bad = [e for e in episodes if not isinstance(e, (int, np.integer)) or not 0 <= e < total]
        if bad:
            raise ValueError(f"episodes: {bad[0]!r} is not an episode index (allowed 0..{total - 1})")
    keep = set(range(total)) if episodes is None else set(episodes)
    features = meta["features"]
    unsupported = [k for k, f in features.items() if f.get("dtype") == "image"]
    if unsupported:
        raise DatasetError(f"{root}: feature {unsupported[0]!r} has dtype 'image' (PNG in parquet); "
                           "this reader takes video features only")
    videos = [k for k, f in features.items() if f.get("dtype") == "video"]
    if cameras is not None:
        held = recorded_cameras(meta)
        missing = [c for c in cameras if c not in held]
        if missing:
            raise DatasetError(f"{root}: no camera {missing[0]!r}; it records {', '.join(held) or 'no cameras'}")
        videos = [VIDEO_PREFIX + c for c in cameras]
    tasks = read_tasks(root)
    loaded: tuple[Path, pa.Table] | None = None  # the last data file read (episodes come in file order)
    for row in meta["episodes"]:
        if row["episode_index"] not in keep:
            continue
        path = root / meta["data_path"].format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"])
        if loaded is None or loaded[0] != path:
            loaded = (path, read_table(path))
        table = loaded[1]
        rows = table.filter(pc.equal(table["episode_index"], row["episode_index"]))
        if rows.num_rows != row["length"]:
            raise DatasetError(f"{path}: {rows.num_rows} frames of episode {row['episode_index']}, "
                               f"meta/episodes says {row['length']}")
        if "index" in rows.column_names and "dataset_from_index" in row:
            index = _column(rows, "index")
            if index[0] != row["dataset_from_index"] or index[-1] != row["dataset_to_index"] - 1:
                raise DatasetError(f"{path}: episode {row['episode_index']} holds frames {index[0]}..{index[-1]}, "
                                   f"meta/episodes says {row['dataset_from_index']}..{row['dataset_to_index'] - 1}")
        episode: dict[str, Any] = {}
        for name in rows.column_names:
            key = _our_key(name)
            if key is not None:
                episode[key] = torch.from_numpy(np.array(_column(rows, name)))
        timestamps = _column(rows, "timestamp").astype(np.float64)
        for vkey in videos:
            vpath = root / meta["video_path"].format(video_key=vkey, chunk_index=row[f"videos/{vkey}/chunk_index"],
                                                     file_index=row[f"videos/{vkey}/file_index"])
            times = row[f"videos/{vkey}/from_timestamp"] + timestamps
            episode[IMAGE_PREFIX + vkey[len(VIDEO_PREFIX):]] = torch.from_numpy(decode_frames(vpath, times))
        if "task_index" in rows.column_names:
            task_index = _column(rows, "task_index").tolist()
            unknown = sorted(set(task_index) - set(tasks))
            if unknown:
                raise DatasetError(f"{path}: task_index {unknown[0]} is not in meta/tasks.parquet")
            episode["frame_tasks"] = [tasks[t] for t in task_index]
        else:
            episode["frame_tasks"] = [row["tasks"][0]] * row["length"]
        episode["instruction"] = episode["frame_tasks"][0]
        episode["seed"] = row.get("seed")
        yield episode
