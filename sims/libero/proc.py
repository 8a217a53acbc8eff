"""LIBERO's side venv (.venv-libero, `make libero`) and a handle on one LIBERO worker process
(sims/libero/worker.py); the process, pipes and shared memory are sims/sidevenv/proc.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from sims.sidevenv.proc import SideVenv, WorkerDied, WorkerProc

SIDE = SideVenv(key="libero", label="LIBERO", variable="LIBERO_PYTHON", venv=".venv-libero", setup="make libero")
WORKER = Path(__file__).with_name("worker.py")

__all__ = ["SIDE", "WorkerDied", "WorkerProc", "libero_python", "start_worker"]


def libero_python() -> Path:
    """The side venv's interpreter: $LIBERO_PYTHON, else .venv-libero/bin/python in the checkout."""
    return SIDE.python()


def start_worker(name: str, suite: str, task: str, height: int = 128, width: int = 128,
                 cameras: Sequence[str] = (), settle: int = 10) -> WorkerProc:
    """One LIBERO env in its own process (call wait_ready before using it): `obs` float64
    [1, 14 + D] (state, goal objects, flat MuJoCo state) and `images` uint8 [1, C, H, W, 3]."""
    return WorkerProc(SIDE, name, WORKER, ["--suite", suite, "--task", task, "--height", height, "--width", width,
                                           "--cameras", ",".join(cameras), "--settle", settle])
