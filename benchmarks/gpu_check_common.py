"""Shared pieces of `make gpu-check`'s parts (benchmarks/gpu_check.py): how a part reports a row,
the --dry-run switch, and watching a training command until it reaches a success rate."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# --dry-run: the warp parts on warp's CPU device at 1/64 of their sizes, the vla_* parts with the tiny
# preset on the CPU (tests this script without a GPU); the parent sets it for its children
DRY = os.environ.get("GPU_CHECK_DRY") == "1"
DEV = "cpu" if DRY else "cuda"


def size(n: int) -> int:
    return max(n // 64, 16) if DRY else n


def row(part: str, what: str, value: str, ref: str = "", note: str = "") -> None:
    """Print one table row for the parent process (rows survive a part's timeout)."""
    print("ROW " + json.dumps([part, what, value, ref, note]), flush=True)


def _die_with_parent() -> None:
    """In a child before it runs (Linux): SIGKILL when the process that started it dies. A part that
    runs out of time is killed with its process group; the command it watches has a session of its
    own (so that its own workers can be killed with it) and would otherwise run on, holding the GPU."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def watch(cmd: list[str], limit: float, parse, cwd: Path) -> tuple[float | None, str]:
    """Run cmd until parse(line) returns (success rate >= 0.9, env steps) or `limit` s pass;
    returns (seconds to 0.9 or None, the best 'rate at steps' seen)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_die_with_parent)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] and None, daemon=True).start()
    best, best_rate, hit, tail = "none", -1.0, None, []
    while time.perf_counter() - t0 < limit:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None and lines.empty():
                break
            continue
        tail = (tail + [line.rstrip()])[-8:]
        got = parse(line)
        if got is None:
            continue
        rate, steps = got
        if rate > best_rate:
            best, best_rate = f"{rate:.2f} at {steps:,} env steps ({time.perf_counter() - t0:.0f} s)", rate
        if rate >= 0.9:
            hit = time.perf_counter() - t0
            break
    os.killpg(proc.pid, 9) if proc.poll() is None else None
    proc.wait()
    if hit is None:
        print("\n".join(tail), flush=True)
    return hit, best
