"""The LeRobotDataset v3.0 layout: path templates, feature names, and the small metadata files.

  meta/info.json            version, fps (an int when integral), features, totals, path templates
  meta/tasks.parquet        one row per task: column task_index, the task text as the DataFrame
                            index (pandas metadata names the index column), as LeRobot writes it
  meta/episodes/chunk-{c:03d}/file-{f:03d}.parquet   one row per episode (any number of files)
  data/...parquet, videos/.../...mp4                 see embodied/data/dataset.py

Everything here reads with pyarrow alone; pandas is not needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
TASKS_PATH = "meta/tasks.parquet"
# Our episode keys (what EpisodeWriter.add takes) -> LeRobot feature names.
FEATURE_NAMES = {"obs.state": "observation.state", "obs.privileged": "observation.environment_state",
                 "action": "action", "reward": "next.reward", "success": "next.success",
                 # on-robot finetuning (embodied/robot_rl): LeRobot's HIL-SERL records interventions
                 # under complementary_info too
                 "intervened": "complementary_info.is_intervention",
                 "weight_version": "complementary_info.weight_version",
                 "base_action": "complementary_info.base_action",  # a residual's frozen VLA action per frame
                 # DART demos (embodied/data/collect.py): `action` is the expert's clean label (SFT reads
                 # it); the noisy action the env executed is here (the world model reads it)
                 "executed_action": "complementary_info.executed_action"}
IMAGE_PREFIX = "obs.rgb_"
VIDEO_PREFIX = "observation.images."
# LeRobot's default tolerance between a frame's timestamp and the video frame it names (s).
TOLERANCE_S = 1e-4


class DatasetError(ValueError):
    """A missing, foreign or corrupt dataset; the message is one line."""


def video_key(camera: str) -> str:
    return VIDEO_PREFIX + camera


def info_fps(fps: float) -> int | float:
    """fps as info.json holds it: an int when integral (as LeRobot writes it), else the float."""
    fps = float(fps)
    if not np.isfinite(fps) or fps <= 0:
        raise DatasetError(f"fps: must be a positive number, got {fps}")
    return int(fps) if fps.is_integer() else fps


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


def read_table(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing") from None
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{path}: unreadable parquet ({str(e).splitlines()[0][:120]})") from None


def tasks_table(tasks: list[str]) -> pa.Table:
    """meta/tasks.parquet as pandas' DataFrame({"task_index": ...}, index=Index(tasks, name="task"))
    writes it: columns task_index, task, and pandas metadata naming "task" the index."""
    table = pa.table({"task_index": pa.array(np.arange(len(tasks), dtype=np.int64)), "task": pa.array(tasks)})
    pandas_meta = {"index_columns": ["task"],
                   "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                                       "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
                   "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                                "numpy_type": "int64", "metadata": None},
                               {"name": "task", "field_name": "task", "pandas_type": "unicode",
                                "numpy_type": "object", "metadata": None}],
                   "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}}
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def read_tasks(root: Path) -> dict[int, str]:
    """task_index -> task text. The text is the table's pandas index (named "task", or unnamed:
    "__index_level_0__"); datasets we wrote before this layout fix hold it in a plain "task" column."""
    path = root / TASKS_PATH
    table = read_table(path)
    index_cols = (table.schema.pandas_metadata or {}).get("index_columns", [])
    text_col = next((c for c in index_cols if isinstance(c, str)), None)
    if text_col is None and "task" in table.column_names:
        text_col = "task"
    if text_col is None or "task_index" not in table.column_names:
        raise DatasetError(f"{path}: expected a task_index column and the task text as the index, "
                           f"got columns {table.column_names}")
    return dict(zip(table["task_index"].to_pylist(), table[text_col].to_pylist()))


def read_episode_rows(root: Path, total: int) -> list[dict[str, Any]]:
    """The first `total` episode rows (the committed ones) from every meta/episodes file, by index."""
    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    rows = [r for f in files for r in read_table(f).to_pylist()]
    rows = sorted(rows, key=lambda r: r["episode_index"])[:total]  # rows past the commit point are ignored
    missing = sorted(set(range(total)) - {r["episode_index"] for r in rows})
    if missing:
        raise DatasetError(f"{root}: meta/episodes lacks episode {missing[0]} ({len(missing)} of the {total} "
                           "that info.json commits)")
    return rows
