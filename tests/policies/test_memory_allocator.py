"""policies/memory.py return_freed_memory: a freed tensor's memory goes back to the system, so that a
CPU run's resident memory follows the predicted peak (docs/results/vla_memory.md: without it a LoRA
step at SmolVLA size held 2.4 times what it used)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A backward's pattern in a fresh process: one mapped 24 MiB block freed (glibc then raises its
# mmap threshold to 24 MiB), then layer activations of 8-19 MiB allocated and freed between small
# blocks that stay (the gradients); the growth of the resident memory, before and after the call.
SCRIPT = """
import json, torch
from policies.memory import return_freed_memory

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

def pattern():
    keep = []
    x = torch.ones(24 << 20, dtype=torch.uint8)
    del x
    before = rss()
    for i in range(12):
        t = torch.ones((8 + i) << 20, dtype=torch.uint8)
        keep.append(torch.ones(256 << 10, dtype=torch.uint8))
        del t
    return (rss() - before) / 2 ** 20

kept = pattern()
done = return_freed_memory()
print(json.dumps({"kept_mib": kept, "set": done, "kept_after_mib": pattern()}))
"""


def test_freed_activations_leave_the_resident_memory_after_return_freed_memory():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["set"] is True
    # glibc keeps most of the 162 MiB freed (they sit below the kept blocks); after the call only
    # the kept 3 MiB and page rounding remain
    assert got["kept_mib"] > 100, got
    assert got["kept_after_mib"] < 8, got
