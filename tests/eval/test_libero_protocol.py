"""LIBERO's evaluation protocol (embodied/eval/libero_protocol.py) and collect's LIBERO cameras: the report
folder from episodes (no worker), the input checks of `embodied sim2real --task libero:...`, and
the scripted expert through the protocol on one init state (needs .venv-libero)."""

from __future__ import annotations

import json

import pytest

from embodied.data.collect import _check
from embodied.eval.results_file import load_results
from embodied.eval.sim2real import sim2real
from embodied.eval.sim2real_robot import Sim2RealError
from sims.libero.proc import libero_python
from embodied.eval.libero_protocol import mean_over_tasks, run_episodes, run_source, tasks_of, write_folder
from sims.vecenv import EnvError


def _episodes(label: str, per_task: list[int], inits: int = 10) -> list[dict]:
    """Task t succeeds on its first per_task[t] init states."""
    return [{"checkpoint": label, "condition": "nominal", "task": f"libero_spatial/{t}", "seed": k,
             "success": k < wins, "length": 50 if k < wins else 220, "run": k // 10}
            for t, wins in enumerate(per_task) for k in range(inits)]


def test_report_folder_per_task_and_over_tasks(tmp_path):
    assert tasks_of("libero:libero_goal") == [f"libero:libero_goal/{k}" for k in range(10)]
    assert tasks_of("libero:libero_10/3") == ["libero:libero_10/3"]
    eps = _episodes("a", [10, 5, 0]) + _episodes("b", [2, 2, 2])
    assert mean_over_tasks(eps) == {"a": "0.500 [0.332, 0.668] (15/30, 3 tasks)",
                                    "b": "0.200 [0.095, 0.373] (6/30, 3 tasks)"}
    info = {"control_hz": 20.0, "max_episode_steps": 220, "chunk_size": 1}
    report = write_folder(tmp_path, "libero:libero_spatial", 10, eps, info, {"a": "x", "b": "y"}, 10, 1.0)
    text = report.read_text()
    assert "| a | nominal | libero_spatial/1 | 10 | 5 | 0.50 [0.24, 0.76] |" in text
    assert "| b | nominal | 1 | 3 |" in text  # the IQM over 1 run x 3 tasks
    assert "The protocol does not state" not in text and (tmp_path / "report.html").is_file()
    proto = load_results(tmp_path / "results.json").protocol
    assert proto["max_episode_steps"] == 220 and proto["seeds"] == list(range(10))
    assert proto["mean_over_tasks"]["a"].startswith("0.500")


def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(Sim2RealError, match=r"--trials: 51; LIBERO has 50 official init states"):
        sim2real(["nothing"], "libero:libero_spatial", tmp_path, trials=51)
    with pytest.raises(Sim2RealError, match=r"--sweep, --twin, --robot: libero:libero_spatial has no"):
        sim2real(["nothing"], "libero:libero_spatial", tmp_path, trials=5, sweep_file="s.yaml")
    with pytest.raises(EnvError, match=r"inits: 0; LIBERO has 50 .* allowed: 1..50"):
        run_episodes("x", None, None, "libero:libero_spatial/0", 0, 1)
    with pytest.raises(EnvError, match="unknown LIBERO suite 'libero_nope'"):
        tasks_of("libero:libero_nope")
    # collect: LIBERO's camera names, both by default
    assert _check(2, "rgb", None, 0.0, "libero:libero_spatial/0") == ("agentview", "wrist")
    assert _check(2, "rgb", ["wrist"], 0.0, "libero:libero_spatial/0") == ("wrist",)
    with pytest.raises(EnvError, match=r"--cameras: expected distinct names from agentview, wrist, got 'front'"):
        _check(2, "rgb", ["front"], 0.0, "libero:libero_spatial/0")


@pytest.mark.skipif(not libero_python().exists(), reason=".venv-libero is absent (build it with `make libero`)")
def test_scripted_expert_through_the_protocol(tmp_path):
    """Init state 0 of libero_spatial/0: the pick-and-place expert on privileged state succeeds
    by LIBERO's own check_success (about 95 steps), and the folder holds the episode, the
    suite's max steps and the simulator versions of .venv-libero."""
    run_source("expert", "libero:libero_spatial/0", tmp_path, inits=1, num_envs=1, log=lambda s: None)
    data = json.loads((tmp_path / "results.json").read_text())
    [ep] = data["episodes"]
    assert ep["task"] == "libero_spatial/0" and ep["seed"] == 0 and ep["success"] and 60 < ep["length"] < 150
    proto = data["protocol"]
    assert proto["max_episode_steps"] == 220 and proto["simulator_versions"]["mujoco"].startswith("3.")
    assert proto["mean_over_tasks"] == {"scripted_expert": "1.000 [0.207, 1.000] (1/1, 1 tasks)"}
    with pytest.raises(EnvError, match="no scripted expert for libero_goal"):
        run_source("expert", "libero:libero_goal/0", tmp_path, inits=1)
