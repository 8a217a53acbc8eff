"""MetaWorld's side venv (.venv-metaworld, `make metaworld`; MetaWorld 3.1.1 pins mujoco 3.3.0);
the worker processes are sims/sidevenv/proc.py's, running sims/metaworld/worker.py."""

from __future__ import annotations

from pathlib import Path

from sims.sidevenv.proc import SideVenv

SIDE = SideVenv(key="metaworld", label="MetaWorld", variable="METAWORLD_PYTHON", venv=".venv-metaworld",
                setup="make metaworld")
WORKER = Path(__file__).with_name("worker.py")
OBS_DIM = 39  # MetaWorld's observation, goal visible


def metaworld_python() -> Path:
    """The side venv's interpreter: $METAWORLD_PYTHON, else .venv-metaworld/bin/python in the checkout."""
    return SIDE.python()
