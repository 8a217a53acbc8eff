"""Save/load a world model: PATH/model.safetensors (weights, normalisation, reset states and,
with cameras, their frames) and PATH/config.json (WorldModelConfig: the task, observation
keys, cameras, sizes, thresholds; plus the reset states' instructions)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import torch

from sims.vecenv import EnvError
from sims.world_model.model import WorldModel, WorldModelConfig

WEIGHTS, CONFIG = "model.safetensors", "config.json"


def save_world_model(path: str | Path, model: WorldModel, resets: dict) -> Path:
    """resets: {"x": float32 [N, P] reset vectors, "t": int64 [N] their frame index,
    "instruction": list[str] of N, and with cameras "img": uint8 [N, 3C, H, W] their frames}."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors["resets.x"] = resets["x"].float().contiguous()
    tensors["resets.t"] = resets["t"].long().contiguous()
    if "img" in resets:
        tensors["resets.img"] = resets["img"].contiguous()
    save_file(tensors, str(path / WEIGHTS))
    meta = {"config": model.cfg.to_dict(), "reset_instructions": list(resets["instruction"])}
    (path / CONFIG).write_text(json.dumps(meta, indent=1))
    return path


def load_world_model(path: str | Path, task: str | None = None) -> tuple[WorldModel, dict]:
    """(model in eval mode, resets); EnvError (one line) for a missing checkpoint or one
    trained for another task than `task`."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise EnvError(f"world model: {path} holds no {CONFIG} and {WEIGHTS}; train one with "
                       "`embodied world-model train`")
    try:
        meta = json.loads((path / CONFIG).read_text())
        cfg_raw = meta["config"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EnvError(f"world model: {path / CONFIG} is unreadable ({type(e).__name__}); allowed: the config.json "
                       "that `embodied world-model train` wrote") from None
    known = {f.name for f in fields(WorldModelConfig)}
    cfg = WorldModelConfig(**{k: v for k, v in cfg_raw.items() if k in known})
    if task is not None and cfg.task != task:
        raise EnvError(f"world model: {path} was trained on task {cfg.task!r}, not {task!r}")
    try:
        tensors = load_file(str(path / WEIGHTS))
    except Exception as e:  # safetensors' SafetensorError on a truncated or corrupt file
        raise EnvError(f"world model: {path / WEIGHTS} is unreadable ({type(e).__name__}: "
                       f"{(str(e).splitlines() or [''])[0]}); allowed: a complete file as "
                       "`embodied world-model train` wrote it") from None
    model = WorldModel(cfg)
    model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
    model.eval()
    resets = {"x": tensors["resets.x"], "t": tensors["resets.t"], "instruction": meta["reset_instructions"]}
    if "resets.img" in tensors:
        resets["img"] = tensors["resets.img"]
    return model, resets
