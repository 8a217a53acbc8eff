"""Released VLA checkpoints -> the toolkit's policies, strictly (docs/vla.md, "Released checkpoints").

load_pretrained(path, input_map=..., tokenizer=...) detects the format from the files
(detect.py), maps every tensor onto a FlowVLA (pi0.py: pi0 and pi0.5, LeRobot and openpi;
smolvla.py: SmolVLA), strict.py checking that every checkpoint tensor is used and every
parameter filled, sets the checkpoint's normalisation (stats.py) and the env-to-checkpoint
input map (input_map.py); presets.py holds the real-size configs. The result is an ordinary policy:
`save_pretrained` writes our format, `from_pretrained` reloads it, and every RL path runs on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from policies.vla.pretrained.detect import FORMATS, detect_format
from policies.vla.pretrained.files import PretrainedError
from policies.vla.pretrained.input_map import InputMap

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# Formats our architectures cannot hold exactly, and what differs (docs/vla.md).
NOT_EXPRESSIBLE = {
    "openvla_oft": "OpenVLA-OFT fuses DINOv2 and SigLIP towers behind a 3-layer MLP projector and regresses actions "
                   "with an MLP head (L1) over parallel-decoded positions; ARVLA has one SigLIP tower, a linear "
                   "projector and token-bin actions",
}


def load_pretrained(path: str | Path, input_map: str | Path | InputMap | dict[str, Any], tokenizer: str | Path,
                    format: str = "auto", dtype: str = "float32") -> Any:
    """A released checkpoint directory -> a FlowVLA holding exactly its weights.

    input_map: a configs/input_maps/*.yaml path (or its fields); tokenizer: a local Hugging
    Face tokenizer directory (pi0's PaliGemma tokenizer is not in its checkpoints; for SmolVLA
    the SmolVLM2 directory, whose config.json gives the VLM's sizes);
    format: "auto" (detect.py) or one of FORMATS; dtype: "float32" or "bfloat16" for the
    backbone and the expert (normalisation, critic and noise head stay float32).
    The load report (strict.LoadReport) is at policy.load_report.
    """
    from policies.vla.pretrained import pi0

    path = Path(path)
    fmt = detect_format(path) if format == "auto" else format
    if fmt not in FORMATS:
        raise PretrainedError(f"format: {fmt!r} is not known; allowed: auto, {', '.join(FORMATS)}")
    if fmt in NOT_EXPRESSIBLE:
        raise PretrainedError(f"{path}: {fmt} cannot be loaded exactly: {NOT_EXPRESSIBLE[fmt]}")
    if dtype not in DTYPES:
        raise PretrainedError(f"dtype: {dtype!r} is not allowed; choose {' or '.join(DTYPES)}")
    imap = input_map if isinstance(input_map, InputMap) else (
        InputMap.from_dict(input_map) if isinstance(input_map, dict) else InputMap.load(input_map))
    from policies.vla.pretrained import smolvla

    loaders = {"lerobot_pi0": pi0.load_lerobot, "lerobot_pi05": pi0.load_lerobot, "openpi": pi0.load_openpi,
               "lerobot_smolvla": smolvla.load_lerobot}
    loader = loaders[fmt]
    policy, report = loader(path, imap, tokenizer)
    if dtype != "float32":
        policy.prefix.to(DTYPES[dtype])
        policy.expert.to(DTYPES[dtype])
    policy.load_report = report
    return policy


__all__ = ["FORMATS", "InputMap", "PretrainedError", "detect_format", "load_pretrained"]
