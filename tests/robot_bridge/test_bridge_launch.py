"""The ROS 2 launch files are valid Python that build their nodes from `embodied` subcommands
(they cannot run without ROS 2 here: checked statically)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from embodied.cli import parser

LAUNCH = Path(__file__).resolve().parents[2] / "launch"


@pytest.mark.parametrize("name,subcommand", [("sim_robot.launch.py", "robot-sim"), ("policy.launch.py", "serve")])
def test_launch_file_is_valid_and_runs_a_known_subcommand(name, subcommand):
    tree = ast.parse((LAUNCH / name).read_text())
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "generate_launch_description" in funcs
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert {"LaunchDescription", "ExecuteProcess", "DeclareLaunchArgument", "LaunchConfiguration"} <= imported
    cmds = [n for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg == "cmd"]
    words = [e.value for e in cmds[0].value.elts if isinstance(e, ast.Constant)]
    assert words[:2] == ["embodied", subcommand]
    options = [w for w in words if w.startswith("--")]
    sub = parser()._subparsers._group_actions[0].choices[subcommand]
    known = {s for a in sub._actions for s in a.option_strings}
    assert set(options) <= known, set(options) - known
