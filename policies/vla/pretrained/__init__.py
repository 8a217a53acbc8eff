"""Released VLA checkpoints -> the toolkit's policies, strictly (docs/vla.md, "Released checkpoints").

load_pretrained(path, input_map=..., tokenizer=...) detects the format from the files
(detect.py), maps every tensor onto a FlowVLA (pi0.py: pi0 and pi0.5, LeRobot and openpi;
smolvla.py: SmolVLA) or an OFTVLA (oft.py: OpenVLA-OFT, its LoRA merged on load), strict.py
checking that every checkpoint tensor is used and every parameter filled, sets the
checkpoint's normalisation (norm_stats.py) and the env-to-checkpoint input map (input_map.py);
presets.py holds the real-size configs. The result is an ordinary policy:
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


def load_pretrained(path: str | Path, input_map: str | Path | InputMap | dict[str, Any],
                    tokenizer: str | Path | None = None, format: str = "auto", dtype: str = "float32",
                    base: str | Path | None = None) -> Any:
    """A released checkpoint directory -> a FlowVLA (pi0, pi0.5, SmolVLA) or an OFTVLA
    (OpenVLA-OFT) holding exactly its weights.

    input_map: a configs/input_maps/*.yaml path (or its fields); tokenizer: a local Hugging
    Face tokenizer directory (pi0's PaliGemma tokenizer is not in its checkpoints; for SmolVLA
    the SmolVLM2 directory, whose config.json gives the VLM's sizes; OpenVLA-OFT: default the
    checkpoint directory, which holds Llama-2's); base: OpenVLA-OFT only, the model an
    adapter-only checkpoint fine-tuned (its adapter is merged into it on load);
    format: "auto" (detect.py) or one of FORMATS; dtype: "float32" or "bfloat16" for the
    backbone and the expert (normalisation, critic and noise head stay float32).
    The load report (strict.LoadReport) is at policy.load_report.
    """
    from policies.vla.pretrained import pi0

    path = Path(path)
    fmt = detect_format(path) if format == "auto" else format
    if fmt not in FORMATS:
        raise PretrainedError(f"format: {fmt!r} is not known; allowed: auto, {', '.join(FORMATS)}")
    if tokenizer is None and fmt != "openvla_oft":
        raise PretrainedError(f"tokenizer: {fmt} checkpoints do not ship their tokenizer; give its local directory")
    if base is not None and fmt != "openvla_oft":
        raise PretrainedError(f"base: applies to openvla_oft checkpoints only, not {fmt}")
    if dtype not in DTYPES:
        raise PretrainedError(f"dtype: {dtype!r} is not allowed; choose {' or '.join(DTYPES)}")
    imap = input_map if isinstance(input_map, InputMap) else (
        InputMap.from_dict(input_map) if isinstance(input_map, dict) else InputMap.load(input_map))
    from policies.vla.pretrained import smolvla

    loaders = {"lerobot_pi0": pi0.load_lerobot, "lerobot_pi05": pi0.load_lerobot, "openpi": pi0.load_openpi,
               "lerobot_smolvla": smolvla.load_lerobot}
    if fmt == "openvla_oft":
        from policies.vla.pretrained import oft

        policy, report = oft.load(path, imap, tokenizer, base)
    else:
        policy, report = loaders[fmt](path, imap, tokenizer)
    if dtype != "float32":  # the OFT head, statistics, critic and noise parts stay float32
        policy.prefix.to(DTYPES[dtype])
        for part in ("expert", "proprio_proj"):
            if getattr(policy, part, None) is not None:
                getattr(policy, part).to(DTYPES[dtype])
    policy.load_report = report
    return policy


__all__ = ["FORMATS", "InputMap", "PretrainedError", "detect_format", "load_pretrained"]
