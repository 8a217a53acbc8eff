"""The parent's side of one side-venv worker (sims/sidevenv/worker.py): process, pipes, shared memory.

`send` and `recv` are split so that several workers run a step in parallel (send to all, then
receive from all). The worker's stderr goes to a temporary file: its last line names the cause
when the worker dies or fails to start. Its hello frame declares the arrays of its shared memory
({name: [dtype, shape, offset]}); they become attributes (`wk.obs`, `wk.images`), live views.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import tempfile
from multiprocessing import resource_tracker, shared_memory
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sims.frames import read_frame, write_frame
from sims.vecenv import EnvError

REPO = Path(__file__).resolve().parents[2]


class WorkerDied(EnvError):
    """A worker process that exited (or closed its pipes): one line naming it, its exit code and
    the last line of its stderr."""


@dataclass(frozen=True)
class SideVenv:
    """Where a family's side venv lives: key ("libero") prefixes messages, label ("LIBERO") names
    it, $variable overrides the interpreter, venv is its folder in the checkout, setup builds it."""

    key: str
    label: str
    variable: str
    venv: str
    setup: str
    interpreter: str = ""  # a fixed interpreter (a gym mapping's python), instead of $variable / venv

    def python(self) -> Path:
        """The side venv's interpreter: interpreter, else $variable, else <checkout>/<venv>/bin/python."""
        if self.interpreter:
            return Path(self.interpreter)
        return Path(os.environ.get(self.variable) or REPO / self.venv / "bin" / "python")


def _last_line(path: str) -> str:
    try:
        lines = [s.strip() for s in Path(path).read_text(errors="replace").splitlines() if s.strip()]
    except OSError:
        return "(no stderr)"
    return lines[-1] if lines else "(no stderr)"


class WorkerProc:
    """One worker process: the side venv's python running `script args...`."""

    def __init__(self, side: SideVenv, name: str, script: Path, args: list[str]):
        python = side.python()
        if not python.exists():
            raise EnvError(f"{side.key}: no {side.label} interpreter at {python}; run `{side.setup}` "
                           f"(or set {side.variable})")
        self.family, self.name, self.shm, self.proc = side.key, name, None, None
        self.spawn = (side, name, script, list(args))  # to start it again
        self.views: dict[str, np.ndarray] = {}
        fd, self.err_path = tempfile.mkstemp(prefix=f"{side.key}-worker-", suffix=".log")
        env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), PYTHONUNBUFFERED="1")
        env.pop("PYTHONPATH", None)  # the worker must not see the main venv's packages
        self.proc = subprocess.Popen([str(python), str(script), *map(str, args)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=fd, env=env, cwd=str(REPO))
        os.close(fd)
        self.info: dict[str, Any] = {}

    def __getattr__(self, key: str) -> np.ndarray:
        views = self.__dict__.get("views") or {}
        if key in views:
            return views[key]
        raise AttributeError(key)

    def wait_ready(self, timeout: float) -> dict:
        """Wait for the hello frame; map the shared memory's arrays."""
        info = self.recv(timeout, check=False)
        if not info.get("ok"):
            self.close()
            raise EnvError(f"{self.family}: {self.name}: {info.get('reason')}")
        if info.get("shm"):
            self.shm = shared_memory.SharedMemory(name=info["shm"])
            resource_tracker.unregister(self.shm._name, "shared_memory")  # the worker owns and unlinks it
            self.views = {k: np.ndarray(tuple(shape), np.dtype(dt), buffer=self.shm.buf, offset=off)
                          for k, (dt, shape, off) in info["arrays"].items()}
        self.info = info
        return info

    def _dead(self) -> WorkerDied:
        code = self.proc.poll() if self.proc else None
        if code is None and self.proc is not None:  # pipes closed as it exits: wait for its code
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return WorkerDied(f"{self.family}: worker {self.name} died (exit {code}): {_last_line(self.err_path)}")

    def send(self, req: dict) -> None:
        try:
            write_frame(self.proc.stdin, req)
        except (BrokenPipeError, OSError, AttributeError, ValueError):
            raise self._dead() from None

    def recv(self, timeout: float | None = None, check: bool = True) -> dict:
        """The next reply; with check, a failed request raises one line naming the worker."""
        out = self.proc.stdout if self.proc else None
        if out is None:
            raise self._dead()
        if timeout is not None and not select.select([out], [], [], timeout)[0]:
            err = _last_line(self.err_path)
            self.close()
            raise EnvError(f"{self.family}: worker {self.name} gave no answer in {timeout:.0f} s: {err}")
        try:
            reply = read_frame(out)
        except (OSError, ValueError, struct.error):
            reply = None
        if reply is None:
            raise self._dead()
        if check and not reply.get("ok"):
            raise EnvError(f"{self.family}: worker {self.name}: {reply.get('reason')}")
        return reply

    def call(self, req: dict) -> dict:
        self.send(req)
        return self.recv()

    def close(self) -> None:
        if self.shm is not None:
            self.views = {}  # release the views before closing
            try:
                self.shm.close()
            except BufferError:
                pass
            self.shm = None
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    write_frame(self.proc.stdin, {"op": "quit"})
                    self.proc.wait(timeout=10)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    self.proc.kill()
                    self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            self.proc = None
        if os.path.exists(self.err_path):
            os.unlink(self.err_path)


def side_versions(python: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """{package: version} as the interpreter `python` sees them (a side venv's)."""
    import json

    code = ("import json; from importlib.metadata import version as v; print(json.dumps({n: v(n) for n in "
            f"{tuple(packages)!r}}}))")
    try:
        return json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                                         timeout=60, check=True).stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {packages[0]: "unknown"}
