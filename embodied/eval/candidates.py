"""The checkpoints an evaluation compares (loaded once, labelled by run and checkpoint), and the
software versions its report records. Shared by `embodied sim2real` (sim2real.py) and LIBERO's
protocol (libero_protocol.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied.eval.sim2real_robot import Sim2RealError


@dataclass
class Checkpoint:
    label: str  # unique name in the report: <run dir>/<checkpoint>
    path: Path
    cfg: Any  # ExperimentConfig the checkpoint was trained with
    policy: Any


def load_checkpoints(paths: list[str], task: str, device: str = "auto") -> list[Checkpoint]:
    """The checkpoints' policies on `device` (auto, cpu, cuda, cuda:N; embodied/run/device.py):
    checkpoints of `embodied train` or policy directories (`embodied sft`'s final;
    embodied.run.load.load_trained)."""
    from embodied.run.device import resolve_device
    from embodied.run.load import load_trained

    out = []
    for p in paths:
        ckpt, cfg, policy = load_trained(p)
        run = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent
        label = f"{run.name}/{ckpt.name}"
        if cfg.env.task != task:
            raise Sim2RealError(f"--task: {task!r} does not match checkpoint {label}'s task {cfg.env.task!r}")
        if any(c.label == label for c in out):
            raise Sim2RealError(f"CHECKPOINT: {label} is given twice")
        out.append(Checkpoint(label, ckpt, cfg, policy.to(resolve_device(device, "--device"))))
    return out


def versions(task: str = "") -> tuple[str, dict[str, str]]:
    """(this toolkit's version, {simulator package: version}) for a report's protocol."""
    from importlib import metadata

    import mujoco
    import torch

    try:
        toolkit = metadata.version("embodied-rl")
    except metadata.PackageNotFoundError:
        toolkit = "unknown"
    sims = {"mujoco": mujoco.__version__, "torch": torch.__version__}
    if task:
        from sims.family import family_of

        sims.update(family_of(task).versions())
    return toolkit, sims
