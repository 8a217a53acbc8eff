"""The parent's side of a MetaWorld worker (sims/metaworld/worker.py): process, pipes, shared memory.

`send` and `recv` are split so that several workers run a step in parallel (send to all, then
receive from all). The worker's stderr goes to a temporary file: its last line names the cause
when the worker dies or fails to start.
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
OBS_DIM = 39


def metaworld_python() -> Path:
    """The side venv's interpreter: $METAWORLD_PYTHON, else .venv-metaworld/bin/python in the checkout."""
    return Path(os.environ.get("METAWORLD_PYTHON") or REPO / ".venv-metaworld" / "bin" / "python")


def _last_line(path: str) -> str:
    try:
        lines = [s.strip() for s in Path(path).read_text(errors="replace").splitlines() if s.strip()]
    except OSError:
        return "(no stderr)"
    return lines[-1] if lines else "(no stderr)"


class WorkerProc:
    """One worker process. With tasks: `obs` float64 [E, 39] and `images` uint8 [E, C, H, W, 3],
    live views into its shared memory. With expert=True: MetaWorld's scripted policies only."""

    def __init__(self, name: str, tasks: list[str] = (), height: int = 64, width: int = 64,
                 cameras: list[str] = (), expert: bool = False):
        py = metaworld_python()
        if not py.exists():
            raise EnvError(f"metaworld: no MetaWorld interpreter at {py}; run `make metaworld` (or set METAWORLD_PYTHON)")
        self.name, self.shm, self.proc, self.size = name, None, None, (height, width)
        self.n_envs, self.n_cams = len(tasks), len(cameras)
        fd, self.err_path = tempfile.mkstemp(prefix="metaworld-worker-", suffix=".log")
        env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), PYTHONUNBUFFERED="1")
        env.pop("PYTHONPATH", None)  # the worker must not see the main venv's packages
        args = ["--expert"] if expert else ["--tasks", ",".join(tasks), "--height", str(height), "--width",
                                            str(width), "--cameras", ",".join(cameras)]
        self.proc = subprocess.Popen([str(py), str(WORKER), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=fd, env=env, cwd=str(REPO))
        os.close(fd)
        self.info: dict[str, Any] = {}

    def wait_ready(self, timeout: float) -> dict:
        """Wait for the hello frame; map the shared memory."""
        info = self.recv(timeout, check=False)
        if not info.get("ok"):
            self.close()
            raise EnvError(f"metaworld: {self.name}: {info.get('reason')}")
        if "shm" in info:
            self.shm = shared_memory.SharedMemory(name=info["shm"])
            resource_tracker.unregister(self.shm._name, "shared_memory")  # the worker owns and unlinks it
            E, C, (h, w) = self.n_envs, self.n_cams, self.size
            self.obs = np.ndarray((E, OBS_DIM), np.float64, buffer=self.shm.buf, offset=0)
            self.images = np.ndarray((E, C, h, w, 3), np.uint8, buffer=self.shm.buf, offset=E * OBS_DIM * 8)
        self.info = info
        return info

    def _dead(self) -> EnvError:
        code = self.proc.poll() if self.proc else None
        if code is None and self.proc is not None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return EnvError(f"metaworld: worker {self.name} died (exit {code}): {_last_line(self.err_path)}")

    def send(self, req: dict) -> None:
        try:
            write_frame(self.proc.stdin, req)
        except (BrokenPipeError, OSError, AttributeError):
            raise self._dead() from None

    def recv(self, timeout: float | None = None, check: bool = True) -> dict:
        """The next reply; with check, a failed request raises one line naming the worker."""
        out = self.proc.stdout
        if timeout is not None and not select.select([out], [], [], timeout)[0]:
            err = _last_line(self.err_path)
            self.close()
            raise EnvError(f"metaworld: worker {self.name} gave no answer in {timeout:.0f} s: {err}")
        try:
            reply = read_frame(out)
        except (OSError, ValueError, struct.error):
            reply = None
        if reply is None:
            raise self._dead()
        if check and not reply.get("ok"):
            raise EnvError(f"metaworld: worker {self.name}: {reply.get('reason')}")
        return reply

    def call(self, req: dict) -> dict:
        self.send(req)
        return self.recv()

    def close(self) -> None:
        if self.shm is not None:
            self.obs = self.images = None  # release the views before closing
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
