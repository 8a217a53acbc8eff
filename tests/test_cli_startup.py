"""The CLI starts instantly: `embodied --help`, `embodied list` and `embodied <sub> --help` import
no torch, transformers, MuJoCo, SAPIEN, CycloneDDS or Ray. Each runs in a fresh interpreter that
prints the modules it imported. No timing asserts: docs/benchmarks.md ("CLI start-up") has
the measured times."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embodied.cli import parser

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "mujoco", "sapien", "cyclonedds", "ray")
MARK = "@@modules@@"
SCRIPT = f"""
import json, sys
from embodied.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
print({MARK!r} + json.dumps({{"rc": rc, "modules": sorted(sys.modules)}}))
"""


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices


SUBCOMMANDS = sorted(_subparsers(parser()))


def run_cli(*args: str) -> tuple[int, str, set[str]]:
    """(exit status, the CLI's stdout, sys.modules keys) of embodied.cli.main(args) in a fresh
    interpreter."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    text, _, tail = out.stdout.rpartition(MARK)
    result = json.loads(tail)
    return (result["rc"] or 0), text, set(result["modules"])


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_subcommands_discovered():
    assert {"train", "eval", "collect", "sft", "pipeline", "robot-sim", "serve", "list"} <= set(SUBCOMMANDS)


def test_help_imports_nothing_heavy():
    rc, text, modules = run_cli("--help")
    assert rc == 0
    assert text.startswith("usage: embodied")
    for sub in SUBCOMMANDS:
        assert sub in text
    assert heavy(modules) == []


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_subcommand_help_imports_nothing_heavy(sub):
    rc, text, modules = run_cli(sub, "--help")
    assert rc == 0
    assert text.startswith(f"usage: embodied {sub}")
    assert heavy(modules) == []


def test_list_imports_nothing_heavy():
    rc, text, modules = run_cli("list")
    assert rc == 0
    lines = text.splitlines()
    assert lines[0] == "tasks:   Compose, ComposeHeldOut, PickCube, PlaceCube, PushCube, Reach, ReachColor, ReachPoint"
    families = {line.split(" ")[0]: line for line in lines}
    assert "ms:PickCube-v1" in families["maniskill"] and "libero:libero_spatial" in families["libero"]
    assert "metaworld:MT10" in families["metaworld"] and "multi:" in families["multi"]
    configs = lines[lines.index("configs:") + 1:]
    assert any(line.startswith("  ppo/: ") and "quickstart" in line for line in configs)
    assert max(map(len, lines)) < 400  # one short line per family and config folder, not one line of all
    assert heavy(modules) == []


def test_heavy_import_is_caught():
    """The check can fail: a CLI that imports torch is reported."""
    script = SCRIPT.replace("from embodied.cli import main", "import torch\nfrom embodied.cli import main")
    out = subprocess.run([sys.executable, "-c", script, "--help"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    modules = set(json.loads(out.stdout.rpartition(MARK)[2])["modules"])
    assert "torch" in heavy(modules)


# The static name tables behind `embodied list` match the modules they stand for.

def test_task_names_match_registry():
    """The names read from the task files' @register_task lines are the classes registered
    when the files are imported."""
    from sims.mujoco.tasks.registry import task_classes, task_names
    from sims.registry import list_tasks

    tasks = task_classes()
    assert len(tasks) >= 6 and task_names() == sorted(tasks)
    assert all(cls.name == name for name, cls in tasks.items())
    assert list_tasks() == sorted(tasks)


def test_maniskill_names_match_table():
    from sims.maniskill.tasks import names
    from sims.registry import MANISKILL_TASK_NAMES

    assert list(MANISKILL_TASK_NAMES) == names()
