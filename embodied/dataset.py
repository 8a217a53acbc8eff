"""Episode datasets on disk (format `embodied-episodes-v0`).

  DIR/meta.json                        task, env spec, one entry per episode
  DIR/episodes/episode_000000.safetensors
      obs.<key>  [L, ...]  observations the actions were taken from (images uint8)
      action     [L, A]    float32
      reward     [L]       float32
      success    [L]       bool
      (safetensors metadata: instruction, seed)

Each episode file is written to a temporary name and renamed; meta.json is
replaced atomically after it. An interrupted collection leaves a valid dataset
holding every finished episode.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors import safe_open
from safetensors.torch import save_file

FORMAT = "embodied-episodes-v0"


class DatasetError(ValueError):
    """A missing, foreign or corrupt dataset; the message is one line."""


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


class EpisodeWriter:
    """Appends episodes to a dataset directory (new, or one of the same task)."""

    def __init__(self, root: str | Path, task: str, spec: dict[str, Any]):
        self.root = Path(root)
        (self.root / "episodes").mkdir(parents=True, exist_ok=True)
        meta_file = self.root / "meta.json"
        if meta_file.exists():
            self.meta = read_meta(self.root)
            if self.meta["task"] != task:
                raise DatasetError(f"{self.root}: holds task {self.meta['task']}, not {task}")
        else:
            self.meta = {"format": FORMAT, "task": task, "spec": spec, "episodes": []}

    def add(self, episode: dict[str, torch.Tensor], instruction: str, seed: int | None) -> int:
        """Write one episode of tensors [L, ...]; returns its index."""
        index = len(self.meta["episodes"])
        name = f"episode_{index:06d}.safetensors"
        final = self.root / "episodes" / name
        tmp = final.with_name(f".{name}.tmp-{os.getpid()}")
        tensors = {k: v.contiguous() for k, v in episode.items()}
        save_file(tensors, str(tmp), metadata={"instruction": instruction, "seed": str(seed)})
        os.replace(tmp, final)
        self.meta["episodes"].append({
            "index": index, "file": f"episodes/{name}", "length": int(episode["action"].shape[0]),
            "success": bool(episode["success"].any()), "instruction": instruction, "seed": seed,
        })
        _atomic_write_text(self.root / "meta.json", json.dumps(self.meta, indent=1))
        return index


def read_meta(root: str | Path) -> dict[str, Any]:
    root = Path(root)
    try:
        meta = json.loads((root / "meta.json").read_text())
    except FileNotFoundError:
        raise DatasetError(f"{root}: not a dataset (no meta.json)") from None
    except json.JSONDecodeError as e:
        raise DatasetError(f"{root}/meta.json: corrupt ({e.msg} at line {e.lineno})") from None
    if meta.get("format") != FORMAT:
        raise DatasetError(f"{root}: format {meta.get('format')!r}, expected {FORMAT!r}")
    return meta


def read_episodes(root: str | Path) -> Iterator[dict[str, Any]]:
    """Yield each episode as a dict of tensors plus 'instruction' and 'seed'."""
    root = Path(root)
    for entry in read_meta(root)["episodes"]:
        path = root / entry["file"]
        try:
            with safe_open(str(path), framework="pt") as f:
                episode: dict[str, Any] = {k: f.get_tensor(k) for k in f.keys()}
                episode.update(f.metadata() or {})
        except Exception as e:  # safetensors raises its own error types
            raise DatasetError(f"{path}: unreadable episode ({type(e).__name__})") from None
        if episode["action"].shape[0] != entry["length"]:
            raise DatasetError(f"{path}: {episode['action'].shape[0]} steps, meta.json says {entry['length']}")
        yield episode
