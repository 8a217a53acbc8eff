"""Reading a released checkpoint's files, each failure a one-line PretrainedError."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
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


class LazyTensors(Mapping):
    """A safetensors file's tensors, each read from disk when accessed, so that loading holds
    the model plus one tensor at a time rather than a second copy of every weight.
    `shapes` {name: shape} comes from the header alone."""

    def __init__(self, path: Path, what: str):
        need_file(path, what)
        self.path, self.what = path, what
        try:
            self._file = safe_open(str(path), framework="pt")
            self.shapes = {k: tuple(self._file.get_slice(k).get_shape()) for k in self._file.keys()}
        except (SafetensorError, OSError, ValueError) as e:
            raise PretrainedError(f"{path}: corrupt safetensors file ({what}): {str(e).splitlines()[0]}") from None

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self.shapes:
            raise KeyError(key)
        try:
            return self._file.get_tensor(key)
        except (SafetensorError, OSError, ValueError) as e:
            raise PretrainedError(f"{self.path}: corrupt tensor {key!r} ({self.what}): {str(e).splitlines()[0]}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)
