"""Which released format a directory holds, from the files present.

  lerobot_pi0 / lerobot_pi05 / lerobot_smolvla   config.json whose "type" is pi0 / pi05 /
                                                 smolvla, and model.safetensors
  openpi                                         model.safetensors and assets/<id>/norm_stats.json
  openvla_oft                                    dataset_statistics.json with lora_adapter/ or
                                                 action_head--*.pt
"""

from __future__ import annotations

import json
from pathlib import Path

from policies.vla.pretrained.files import PretrainedError

FORMATS = ("lerobot_pi0", "lerobot_pi05", "lerobot_smolvla", "openpi", "openvla_oft")


def detect_format(path: str | Path) -> str:
    path = Path(path)
    if not path.is_dir():
        raise PretrainedError(f"{path}: not a directory (a released checkpoint is a directory of files)")
    names = sorted(p.name for p in path.iterdir())
    if (path / "dataset_statistics.json").is_file() and ((path / "lora_adapter").is_dir()
                                                         or any(n.startswith("action_head--") for n in names)):
        return "openvla_oft"
    if (path / "model.safetensors").is_file() and any((path / "assets").rglob("norm_stats.json")):
        return "openpi"
    if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
        try:
            kind = json.loads((path / "config.json").read_text()).get("type")
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            raise PretrainedError(f"{path / 'config.json'}: corrupt JSON; cannot tell the format") from None
        if f"lerobot_{kind}" in FORMATS:
            return f"lerobot_{kind}"
        raise PretrainedError(f"{path}: config.json has type {kind!r}; known LeRobot types: pi0, pi05, smolvla")
    raise PretrainedError(f"{path}: no known checkpoint layout in {names[:8]}; formats: {', '.join(FORMATS)}")
