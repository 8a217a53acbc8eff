"""Reading a released checkpoint's files, each failure a one-line PretrainedError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from policies.base import PolicyLoadError


class PretrainedError(PolicyLoadError):
    """A released checkpoint that cannot be loaded as asked; the message is one line."""


def need_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise PretrainedError(f"{path}: missing file ({what})")
    return path


def read_json(path: Path, what: str) -> Any:
    need_file(path, what)
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PretrainedError(f"{path}: corrupt JSON ({what}): {str(e).splitlines()[0]}") from None


def read_safetensors(path: Path, what: str) -> dict[str, torch.Tensor]:
    need_file(path, what)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise PretrainedError(f"{path}: corrupt safetensors file ({what}): {str(e).splitlines()[0]}") from None
