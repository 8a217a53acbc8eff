"""What `embodied sft` keeps beside a step's weights so that `embodied sft --resume RUN_DIR`
continues the run: the step count, the optimiser and learning-rate schedule, the data order's
generator, torch's RNG and the run's settings.

A step directory `RUN_DIR/step_NNNNNNN` (written atomically by `save_atomic`) holds the
save_pretrained weights, `trainer.pt` (this module's state) and `sft_config.yaml` (the run's
SFTConfig). `--resume` reads the newest step directory that holds both; the run goes on in
RUN_DIR, writing only step directories after it and `final`, and TensorBoard's event files
continue from that step (later events of the interrupted process are purged). A finished run
(`final` present) is not resumed: its weights start a new run with `init_from`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
import yaml

from embodied.config_loader import ConfigError

STATE, CONFIG = "trainer.pt", "sft_config.yaml"


def trainer_state(cfg: Any, opt: Any, sched: Any, step: int, samples: int, generator: torch.Generator) -> dict:
    """The state saved with the weights of step `step`."""
    return {"step": step, "samples": samples, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "data_generator": generator.get_state(), "torch_rng": torch.get_rng_state(),
            "config": dataclasses.asdict(cfg)}


def write(folder: Path, state: dict) -> None:
    """trainer.pt and sft_config.yaml into folder (the step directory's tmp dir, before its rename)."""
    torch.save({k: v for k, v in state.items() if k != "config"}, folder / STATE)
    (folder / CONFIG).write_text(yaml.safe_dump(state["config"], sort_keys=False))


def newest(run: Path) -> Path:
    """The newest step directory of run that --resume can continue from; one line otherwise."""
    if not run.is_dir():
        raise ConfigError(f"--resume: {run} is not a directory; allowed: the run_dir of an `embodied sft` run")
    if (run / "final").is_dir():
        raise ConfigError(f"--resume: {run} is finished ({run / 'final'} exists); to train on from its weights, "
                          f"start a new run: sft CONFIG init_from={run / 'final'} run_dir=NEW_DIR")
    steps = sorted((p for p in run.glob("step_*") if (p / STATE).is_file() and (p / CONFIG).is_file()),
                   key=lambda p: p.name)
    if not steps:
        raise ConfigError(f"--resume: {run} holds no step directory with {STATE} (written every save_every steps "
                          f"and when a signal stops the run); allowed: a run of `embodied sft`")
    return steps[-1]


def read(step_dir: Path, device: torch.device | str = "cpu") -> dict:
    """trainer.pt of step_dir (tensors on device)."""
    try:
        return torch.load(step_dir / STATE, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 (a truncated or foreign file)
        raise ConfigError(f"--resume: {step_dir / STATE} does not load ({type(e).__name__}); allowed: a step "
                          f"directory written by `embodied sft`") from None
