"""The parent's side of one LIBERO worker (sims/libero/worker.py): process, pipes, shared memory.

A request is written to the worker's stdin as one frame; `send` and `recv` are split so that B
workers run a step in parallel (send to all, then receive from all). The worker's stderr goes to
a temporary file: its last line names the cause when the worker dies.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import tempfile
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path
from typing import Any

import numpy as np

from sims.frames import read_frame, write_frame
from sims.vecenv import EnvError

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("worker.py")


class WorkerDied(EnvError):
    """A worker process that exited (or closed its pipes): one line naming it, its exit code and
    the last line of its stderr."""


def libero_python() -> Path:
    """The side venv's interpreter: $LIBERO_PYTHON, else .venv-libero/bin/python in the checkout."""
    return Path(os.environ.get("LIBERO_PYTHON") or REPO / ".venv-libero" / "bin" / "python")


def _last_line(path: str) -> str:
    try:
        lines = [s.strip() for s in Path(path).read_text(errors="replace").splitlines() if s.strip()]
    except OSError:
        return "(no stderr)"
    return lines[-1] if lines else "(no stderr)"


class WorkerProc:
    """One worker: `info` (its hello frame), `state` float32 [8], `objects` float32 [6], `sim` float64 [D],
    `images` uint8 [C, H, W, 3] (live views into its shared memory)."""

    def __init__(self, name: str, suite: str, task: str, height: int, width: int, cameras: list[str],
                 settle: int):
        py = libero_python()
        if not py.exists():
            raise EnvError(f"libero: no LIBERO interpreter at {py}; run `make libero` (or set LIBERO_PYTHON)")
        self.name, self.shm, self.proc = name, None, None
        self.args = (name, suite, task, height, width, list(cameras), settle)  # to start it again
        fd, self.err_path = tempfile.mkstemp(prefix="libero-worker-", suffix=".log")
        env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), PYTHONUNBUFFERED="1")
        env.pop("PYTHONPATH", None)  # the worker must not see the project's packages
        self.proc = subprocess.Popen(
            [str(py), str(WORKER), "--suite", suite, "--task", task, "--height", str(height), "--width",
             str(width), "--cameras", ",".join(cameras), "--settle", str(settle)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fd, env=env, cwd=str(REPO))
        os.close(fd)
        self.size = (height, width)
        self.info: dict[str, Any] = {}

    def wait_ready(self, timeout: float) -> dict:
        """Wait for the hello frame; map the shared memory."""
        info = self.recv(timeout)
        if not info.get("ok"):
            self.close()
            raise EnvError(f"libero: {self.name}: {info.get('reason')}")
        self.shm = shared_memory.SharedMemory(name=info["shm"])
        resource_tracker.unregister(self.shm._name, "shared_memory")  # the worker owns and unlinks it
        d, (h, w), c = info["sim_dim"], self.size, len(info["cameras"])
        self.state = np.ndarray((8,), np.float32, buffer=self.shm.buf, offset=0)
        self.objects = np.ndarray((6,), np.float32, buffer=self.shm.buf, offset=32)
        self.sim = np.ndarray((d,), np.float64, buffer=self.shm.buf, offset=56)
        self.images = np.ndarray((c, h, w, 3), np.uint8, buffer=self.shm.buf, offset=56 + 8 * d)
        self.info = info
        return info

    def _dead(self) -> WorkerDied:
        code = self.proc.poll() if self.proc else None
        if code is None and self.proc is not None:  # pipes closed as it exits: wait for its code
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return WorkerDied(f"libero: worker {self.name} died (exit {code}): {_last_line(self.err_path)}")

    def send(self, req: dict) -> None:
        try:
            write_frame(self.proc.stdin, req)
        except (BrokenPipeError, OSError):
            raise self._dead() from None

    def recv(self, timeout: float | None = None) -> dict:
        out = self.proc.stdout
        if timeout is not None and not select.select([out], [], [], timeout)[0]:
            self.close()
            raise EnvError(f"libero: worker {self.name} gave no answer in {timeout:.0f} s: {_last_line(self.err_path)}")
        try:
            reply = read_frame(out)
        except (OSError, ValueError, struct.error):
            reply = None
        if reply is None:
            raise self._dead()
        return reply

    def call(self, req: dict) -> dict:
        self.send(req)
        reply = self.recv()
        if not reply.get("ok"):
            raise EnvError(f"libero: worker {self.name}: {reply.get('reason')}")
        return reply

    def close(self) -> None:
        if self.shm is not None:
            self.state = self.objects = self.sim = self.images = None  # release the views before closing
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

