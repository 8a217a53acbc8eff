"""`make gpu-check`'s VLA parts (benchmarks/gpu_check.py, gpu_check_vla.py): they run after the
simulator parts, each under its own limit, and a mode that needs a missing bitsandbytes is one line."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gpu_check  # noqa: E402
from gpu_check_vla import bitsandbytes_problem  # noqa: E402


def test_the_vla_parts_run_last_each_under_its_own_limit():
    order = list(gpu_check.PARTS)
    vla = [p for p in order if p.startswith("vla")]
    assert vla == ["vla", "vla_smol", "vla_pi0"] and order[-len(vla):] == vla, order
    assert set(gpu_check.FUNCS) == set(order)  # every part has its function in the split modules
    assert all(gpu_check.PARTS[p] > 0 for p in order)


def test_a_missing_bitsandbytes_is_reported_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # what `import bitsandbytes` meets without it
    msg = bitsandbytes_problem()
    assert msg is not None and "\n" not in msg and msg.startswith("bitsandbytes is not installed"), msg
