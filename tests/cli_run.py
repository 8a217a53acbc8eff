"""Run `embodied ...` as a user does, in a child process, for the tests that signal it mid-run
(tests/run/test_lost_work.py, tests/test_user_errors_fuzz.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "embodied.cli"]


def cli_env() -> dict:
    """The child's environment: one thread, headless rendering, this checkout importable, unbuffered."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1"}


def signal_when_ready(argv: list[str], ready: Callable[[], bool], sig: int, stderr: Path,
                      stdout: Path | None = None, timeout: float = 150.0, group: bool = False) -> tuple[int, str]:
    """Start `embodied ARGV`, send `sig` once ready() holds (within `timeout` s), wait for it to
    end (120 s at most, then it is killed): (exit code, its stderr). stdout goes to `stdout` or
    nowhere. group: the command leads a process group of its own and `sig` goes to all of it, as a
    terminal's Ctrl-C reaches the command and every worker it started; whatever of the group is
    left at the end is killed."""
    with stderr.open("w") as err, (stdout.open("w") if stdout else open(os.devnull, "w")) as out:
        p = subprocess.Popen(CLI + argv, cwd=ROOT, env=cli_env(), stdout=out, stderr=err, start_new_session=group)
        t0 = time.monotonic()
        try:
            while not ready():
                assert p.poll() is None, stderr.read_text()[-2000:]
                assert time.monotonic() - t0 < timeout, "never ready"
                time.sleep(0.2)
            if group:
                os.killpg(p.pid, sig)
            else:
                p.send_signal(sig)
            code = p.wait(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            if group:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    return code, stderr.read_text()
