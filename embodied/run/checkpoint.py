"""Checkpoints: the policy (save_pretrained layout), trainer state, JSON metadata.

Layout of one checkpoint directory:
  policy/config.json, policy/model.safetensors   the policy, loadable alone
  trainer.safetensors                            every tensor of the trainer state
  meta.json                                      config, iteration, env steps, and
                                                 the non-tensor trainer state
A checkpoint is written into a temporary directory and renamed into place, and
`latest` (a one-line file) is replaced atomically afterwards: a run killed at any
moment leaves either the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file


class CheckpointError(ValueError):
    """A missing or unreadable checkpoint; the message is one line."""


def flatten_state(obj: Any, tensors: dict[str, torch.Tensor], prefix: str = "") -> Any:
    """Move tensors and arrays of a nested structure into `tensors`; return JSON."""
    if isinstance(obj, torch.Tensor):
        tensors[prefix] = obj.detach().cpu().contiguous()
        return {"__tensor__": prefix}
    if isinstance(obj, np.ndarray):
        tensors[prefix] = torch.from_numpy(np.array(obj, order="C", copy=True))  # a writable copy (a read-only array warns)
        return {"__ndarray__": prefix}
    if isinstance(obj, dict):
        if not all(isinstance(k, (str, int)) for k in obj):
            raise TypeError(f"{prefix}: state keys must be str or int")
        return {"__dict__": [[k, flatten_state(v, tensors, f"{prefix}/{k}")] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {"__list__": [flatten_state(v, tensors, f"{prefix}/{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"{prefix}: cannot store {type(obj).__name__} in a checkpoint")


def unflatten_state(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of flatten_state."""
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__ndarray__" in obj:
            return tensors[obj["__ndarray__"]].numpy()
        if "__dict__" in obj:
            return {k: unflatten_state(v, tensors) for k, v in obj["__dict__"]}
        if "__list__" in obj:
            return [unflatten_state(v, tensors) for v in obj["__list__"]]
    return obj


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(ckpt_root: Path, name: str, policy: Any, trainer_state: dict[str, Any],
                    meta: dict[str, Any]) -> Path:
    """Write ckpt_root/name atomically and point ckpt_root/latest at it."""
    ckpt_root = Path(ckpt_root)
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = ckpt_root / name
    tmp = ckpt_root / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    policy.save_pretrained(tmp / "policy")
    tensors: dict[str, torch.Tensor] = {}
    meta = {**meta, "trainer_state": flatten_state(trainer_state, tensors, "trainer")}
    save_file(tensors, str(tmp / "trainer.safetensors"))
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    for f in tmp.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    latest_tmp = ckpt_root / f".latest.tmp-{os.getpid()}"
    latest_tmp.write_text(name + "\n")
    os.replace(latest_tmp, ckpt_root / "latest")
    _fsync_dir(ckpt_root)
    return final


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory from itself, a checkpoints/ folder, its `latest` pointer file or a run
    directory."""
    path = Path(path)
    if path.name == "latest" and path.is_file():
        path = path.parent
    for root in (path, path / "checkpoints"):
        if (root / "latest").is_file():
            return root / (root / "latest").read_text().strip()
    if (path / "meta.json").is_file():
        return path
    raise CheckpointError(f"checkpoint not found: {path} "
                          f"(expected a checkpoint, checkpoints/, checkpoints/latest or run directory)")


def policy_dir(path: str | Path) -> Path | None:
    """The policy directory `path` names (save_pretrained's config.json and model.safetensors,
    no trainer state): `path` itself (`embodied sft`'s final, a checkpoint's policy/) or the
    `final` of an `embodied sft` run directory; None if it names none."""
    path = Path(path)
    for d in (path, path / "final"):
        if (d / "config.json").is_file() and (d / "model.safetensors").is_file() and not (d / "meta.json").exists():
            return d
    return None


def load_checkpoint(path: str | Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """Return (checkpoint dir, meta without trainer state, trainer state)."""
    ckpt = resolve_checkpoint(path)
    f = ckpt / "meta.json"
    try:
        meta = json.loads(f.read_text())
        state_json = meta.pop("trainer_state")
        f = ckpt / "trainer.safetensors"
        tensors = load_file(str(f))
        state = unflatten_state(state_json, tensors)
    except Exception as e:  # OSError, JSONDecodeError, KeyError, safetensors' SafetensorError
        raise CheckpointError(f"{f}: unreadable ({type(e).__name__}: {(str(e).splitlines() or [''])[0]}); allowed: "
                              "a checkpoint as `embodied train` wrote it (an earlier one of the run, or copy it "
                              "again)") from None
    return ckpt, meta, state


def check_readable(ckpt: Path) -> None:
    """CheckpointError (one line, naming the file) unless every file of the checkpoint reads."""
    from safetensors import safe_open

    for f in (ckpt / "meta.json", ckpt / "trainer.safetensors", ckpt / "policy" / "config.json",
              ckpt / "policy" / "model.safetensors"):
        try:
            if f.suffix == ".json":
                json.loads(f.read_text())
            else:
                with safe_open(str(f), "pt") as fh:  # the header; a truncated body fails on the tensors
                    for key in fh.keys():
                        fh.get_tensor(key)
        except Exception as e:  # OSError, JSONDecodeError, SafetensorError
            raise CheckpointError(f"{f}: unreadable ({type(e).__name__}: {(str(e).splitlines() or [''])[0]})") from None


def run_dir_of(ckpt: Path) -> Path | None:
    """The run directory holding a checkpoint (RUN/checkpoints/NAME), or None."""
    return ckpt.parent.parent if ckpt.parent.name == "checkpoints" else None


def resume_point(path: str | Path, log=print) -> Path:
    """The checkpoint `--resume PATH` continues from: a checkpoint itself, or the newest readable
    one of a run (its `latest`, else the newest iter_* that reads in full, said aloud)."""
    path = Path(path)
    root = path if (path / "latest").is_file() else path / "checkpoints"
    if not (root / "latest").is_file():
        ckpt = resolve_checkpoint(path)
        check_readable(ckpt)
        return ckpt
    latest = root / (root / "latest").read_text().strip()
    candidates = [latest] + sorted((p for p in root.glob("iter_*") if p.is_dir() and p != latest), reverse=True)
    skipped = []
    for ckpt in candidates:
        try:
            check_readable(ckpt)
        except CheckpointError as e:
            skipped.append(f"{ckpt.name} ({e})")
            continue
        if skipped:
            log(f"resume: {'; '.join(skipped)}; continuing from {ckpt.name}, the newest readable checkpoint")
        return ckpt
    raise CheckpointError(f"--resume: no readable checkpoint in {root}: {'; '.join(skipped)}")


def newer_checkpoints(ckpt: Path) -> list[str]:
    """Names of the checkpoints of ckpt's run later than ckpt (by iteration), that resuming from
    ckpt into the same run would overwrite or leave behind `latest`."""
    root = ckpt.parent
    return sorted(p.name for p in root.glob("iter_*") if p.is_dir() and p.name > ckpt.name)
