"""The command a stopped run prints to continue it starts with words that run `embodied` from
where the user is: `embodied` only when that is on PATH and is the script that ran."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from embodied.run.stop import command_line, program


def _script(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "embodied"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_the_console_script_on_path_is_embodied(tmp_path, monkeypatch):
    exe = _script(tmp_path / "venv" / "bin")
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sys, "argv", [str(exe), "train", "--resume", "r"])
    assert program() == "embodied"
    assert command_line(argv=["train", "x.yaml"], add=["train.total_steps=5"]) == "embodied train x.yaml train.total_steps=5"


def test_a_script_not_on_path_is_named_by_its_path(tmp_path, monkeypatch):
    exe = _script(tmp_path / ".venv" / "bin")
    other = _script(tmp_path / "elsewhere")  # another `embodied` on PATH is not the one that ran
    monkeypatch.setenv("PATH", f"{other.parent}{os.pathsep}/usr/bin")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(exe)])
    assert program() == ".venv/bin/embodied"
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert program() == str(exe)  # outside the working directory: the absolute path


def test_python_dash_m_is_named_by_the_interpreter_and_module(tmp_path, monkeypatch):
    import embodied.cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [embodied.cli.__file__, "collect"])
    interpreter, dash_m, module = program().split(" ")
    assert Path(interpreter).absolute() == Path(sys.executable).absolute() and dash_m == "-m"
    assert module == ("embodied" if (Path(embodied.cli.__file__).parent / "__main__.py").exists() else "embodied.cli")
