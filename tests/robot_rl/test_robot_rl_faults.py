"""`embodied finetune-robot` against the Reach twin over DDS on loopback, processes as in a real
run (twin, actor, learner): the learner killed with SIGKILL mid-run (the actor goes on inside
the limits; a new learner resumes with the buffer intact), an e-stop (a clean end, nothing
commanded after it), and the twin killed (a one-line error, the episodes intact)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from robot_bridge import ros_types as rt
from robot_bridge.safety import SafetyConfig, SafetyFilter
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS

from robot_bridge.transport_factory import make_transport
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "embodied.cli"]


@pytest.fixture(scope="module")
def demos(tmp_path_factory, dds_env):
    out = tmp_path_factory.mktemp("demos") / "reach"
    subprocess.run(CLI + ["collect", "Reach", "--episodes", "3", "--out", str(out)], check=True, cwd=ROOT,
                   capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return out


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}


@pytest.fixture
def world(dds_env, demos, tmp_path):
    """A twin process, a small config in tmp_path, a checker on /cmd; yields helpers."""
    procs: list[subprocess.Popen] = []
    twin = subprocess.Popen(CLI + ["robot-sim", "Reach", "--image-size", "0", "--transport", "dds", "--rate", "50"],
                            cwd=ROOT, env=_env(), stdout=(tmp_path / "twin.log").open("w"), stderr=subprocess.STDOUT)
    procs.append(twin)
    run = tmp_path / "run"
    cfg = {"run_dir": str(run), "demos": str(demos),
           "robot": {"task": "Reach", "privileged_topic": "/privileged", "privileged_dim": 15, "control_hz": 50,
                     "transport": "dds", "reset_timeout_s": 20},
           "init": {"bc_episodes": 3, "bc_steps": 50},
           "sac": {"hidden": [32, 32], "batch_size": 32, "bc_weight": 1.0},
           "actor": {"episodes": 30, "eval_every": 0, "learner_timeout_s": 1.0},
           "learner": {"warmup_transitions": 20, "critic_warmup_updates": 5, "push_every_s": 0.3,
                       "checkpoint_every_s": 0.5}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    checker = Checker()

    def start(role: str, *overrides: str) -> subprocess.Popen:
        p = subprocess.Popen(CLI + ["finetune-robot", str(tmp_path / "cfg.yaml"), *overrides, "--role", role],
                             cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=(tmp_path / f"{role}{len(procs)}.log").open("w"),
                             text=True)
        procs.append(p)
        return p

    yield {"start": start, "run": run, "twin": twin, "checker": checker, "tmp": tmp_path}
    checker.tr.close()
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class Checker:
    """Receives every command and checks it against the safety limits at the TCP it acts on."""

    def __init__(self):
        self.tr = make_transport("dds", node_name="checker")
        self.limits = SafetyFilter(SafetyConfig())
        self.js = self.tr.subscribe("/joint_states", "sensor_msgs/msg/JointState", SENSOR_QOS)
        self.commands: list[tuple[float, list[float]]] = []
        self.violations: list[list[float]] = []
        self.estop = self.tr.publisher("/estop", "std_msgs/msg/Bool", COMMAND_QOS)
        self.tr.subscribe("/cmd", "std_msgs/msg/Float64MultiArray", COMMAND_QOS, callback=self._on_cmd)

    def _on_cmd(self, msg) -> None:
        a = np.asarray(msg.data, np.float64)
        self.commands.append((time.monotonic(), a.tolist()))
        js = self.js.latest()
        tcp = np.asarray(js.msg.position[:3]) if js is not None else np.full(3, np.nan)
        if not self.limits.within_limits(a, tcp):
            self.violations.append(a.tolist())


def _episodes(run: Path) -> list[dict]:
    path = run / "progress.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _until(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _learner_rows(run: Path) -> list[dict]:
    path = run / "learner.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
def test_learner_killed_actor_goes_on_and_a_new_learner_resumes(world):
    from embodied.robot_rl.data import dataset_transitions

    run, checker = world["run"], world["checker"]
    assert world["start"]("init").wait(120) == 0
    learner = world["start"]("learner")
    actor = world["start"]("actor")
    assert _until(lambda: (run / "learner.pt").exists() and any(r["updates"] > 0 for r in _learner_rows(run))
                  and len(_episodes(run)) >= 3, 90), "the learner never checkpointed after updates"
    os.kill(learner.pid, signal.SIGKILL)
    learner.wait(10)
    killed_at = len(_episodes(run))
    versions_before = max(r["version"] for r in _learner_rows(run))
    assert _until(lambda: len(_episodes(run)) >= killed_at + 3, 60), "the actor stopped when the learner died"
    assert actor.poll() is None
    learner2 = world["start"]("learner")
    out, _ = actor.communicate(timeout=180)
    assert actor.returncode == 0, out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["ended"] == "episodes" and summary["episodes"] == 30
    assert learner2.wait(60) == 0
    log = (world["tmp"] / f"learner{4}.log").read_text()
    assert "resumed from" in log
    # the new learner's buffer holds every recorded transition once: those it read from disk (a
    # truncated episode's last step has no next observation there) and those streamed to it
    # (which have it), no duplicate
    from embodied.data.dataset import read_episodes

    recorded, _ = dataset_transitions(run / "online", "privileged")
    truncated = sum(not bool(e["success"].any()) for e in read_episodes(run / "online"))
    final = log.strip().splitlines()[-1]
    online = int(final.split("; ")[1].split(" online")[0])
    assert len(recorded) <= online <= len(recorded) + truncated, final
    assert summary["version"] > versions_before  # weights from the resumed learner reached the actor
    assert checker.commands and checker.violations == []


def test_estop_ends_the_run_cleanly_and_nothing_is_sent_after(world):
    from embodied.data.dataset import read_meta

    run, checker = world["run"], world["checker"]
    proc = world["start"]("all", "actor.episodes=1000")
    assert _until(lambda: len(_episodes(run)) >= 2, 120), "no episodes"
    finished = len(_episodes(run))
    checker.estop.publish(rt.scalar("std_msgs/msg/Bool", True))
    t_estop = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert json.loads(out.strip().splitlines()[-1])["ended"] == "e-stop"
    late = [t for t, _ in checker.commands if t > t_estop + 0.05]  # 50 ms for delivery of the e-stop
    assert late == []
    # every episode finished before the e-stop, and the one it cut short if that one had taken a
    # step (an e-stop between two episodes leaves nothing to record)
    assert read_meta(run / "online")["total_episodes"] >= finished
    assert checker.violations == []


def test_twin_killed_gives_one_line_and_the_episodes_stay(world):
    from embodied.data.dataset import read_episodes

    run = world["run"]
    proc = world["start"]("all", "actor.episodes=1000")
    assert _until(lambda: len(_episodes(run)) >= 2, 120), "no episodes"
    world["twin"].send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    err = [x for x in (world["tmp"] / "all1.log").read_text().splitlines() if x.startswith("embodied finetune-robot: error:")]
    assert len(err) == 1 and "robot: " in err[0], err
    eps = list(read_episodes(run / "online"))
    assert len(eps) >= 2 and all(len(e["action"]) >= 1 for e in eps)


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
def test_hold_sends_nothing_while_the_learner_is_gone(world):
    run, checker = world["run"], world["checker"]
    assert world["start"]("init").wait(120) == 0
    learner = world["start"]("learner")
    actor = world["start"]("actor", "actor.on_learner_loss=hold", "actor.episodes=1000")
    assert _until(lambda: any(r["updates"] > 0 for r in _learner_rows(run)) and len(_episodes(run)) >= 2, 90)
    os.kill(learner.pid, signal.SIGKILL)
    t_kill = time.monotonic()
    time.sleep(1.0 + 2.0)  # actor.learner_timeout_s, then 2 s of holding
    quiet_from = t_kill + 1.0 + 0.2  # the timeout, one control period and delivery
    assert [t for t, _ in checker.commands if t > quiet_from] == []
    assert actor.poll() is None
    world["start"]("learner")  # a new learner: the actor acts again
    n = len(checker.commands)
    assert _until(lambda: len(checker.commands) > n + 20, 60), "the actor did not resume"
    checker.estop.publish(rt.scalar("std_msgs/msg/Bool", True))
    out, _ = actor.communicate(timeout=60)
    assert actor.returncode == 0 and json.loads(out.strip().splitlines()[-1])["held_s"] > 2.0
    assert checker.violations == []
