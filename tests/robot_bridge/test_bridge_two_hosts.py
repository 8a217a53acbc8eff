"""The robot and the learner on two hosts (network namespaces joined by a link, two_hosts.py beside this file):
DDS discovery over the link's interface, then link faults (delay 50 ms, loss 5 %, the link cut
for 3 s). The twin (`embodied robot-sim`) and a command monitor run on the robot host; RobotEnv
with its safety layer drives the twin from the learner host. Asserted: the run steps on every
phase; every command that reaches the robot is inside the safety limits; after the cut,
commanding stops within the watchdog's limit; the run resumes when the link returns.

`pytest -s` prints the measured table (docs/results/ros2_two_hosts.md)."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
from two_hosts import TwoHosts, unavailable  # noqa: E402

CONTROL_HZ = 20.0
WATCHDOG_S = 0.25
# (name, link faults, learner's interface down, seconds); a cut drops every packet on the link
# (netem loss 100 %), "down" takes the learner host's interface down (a pulled cable)
PHASES = (("clean", {}, False, 2.5), ("delay 50 ms", {"delay_s": 0.05}, False, 3.0),
          ("loss 5 %", {"loss": 0.05}, False, 3.0), ("cut 3 s", {"cut": True}, False, 3.0),
          ("restored", {}, False, 2.5), ("interface down 3 s", {}, True, 3.0), ("up again", {}, False, 2.5))
FAULTS = (("cut 3 s", "restored"), ("interface down 3 s", "up again"))


def safety():
    from robot_bridge.safety import SafetyConfig

    return SafetyConfig(action_dim=4, control_hz=CONTROL_HZ, watchdog_s=WATCHDOG_S)


# ---------------------------------------------------------------------- the processes on the hosts
def learner(out: Path, stop: Path, seconds: float) -> None:
    """Learner host: RobotEnv drives the twin with random actions (some out of range, some NaN)
    until `stop` appears; logs every command sent and every step or error (JSON lines)."""
    import torch

    from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
    from sims.vecenv import EnvError

    log = open(out, "a", buffering=1)

    class LoggedEnv(RobotEnv):
        def _publish(self, cmd: np.ndarray, start: np.ndarray) -> None:  # cmd [K, A] (K = 1: a step)
            wall, t = time.time(), time.monotonic()  # before it leaves (the robot's states stamped
            super()._publish(cmd, start)              # before `wall` are what it saw)
            for c in np.atleast_2d(cmd):
                log.write(json.dumps({"k": "cmd", "t": t, "wall": wall, "a": [float(v) for v in c]}) + "\n")

    env = LoggedEnv(RobotEnvConfig(task="Reach", privileged_topic="/privileged", privileged_dim=15, transport="dds",
                                   control_hz=CONTROL_HZ, max_episode_steps=50, obs_timeout_s=1.0,
                                   reset_timeout_s=15.0, safety=safety()))
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    log.write(json.dumps({"k": "ready", "t": time.monotonic()}) + "\n")
    end, need_reset, k = time.monotonic() + seconds, False, 0
    while time.monotonic() < end and not stop.exists():
        k += 1
        a = rng.uniform(-1.5, 1.5, 4)
        if k % 10 == 0:
            a[k % 4] = np.nan
        t0 = time.monotonic()
        try:
            if need_reset:
                env.reset()
                need_reset = False
            else:
                env.step(torch.as_tensor(a[None], dtype=torch.float32))
            log.write(json.dumps({"k": "step", "t0": t0, "t1": time.monotonic()}) + "\n")
        except EnvError as e:
            need_reset = need_reset or "reset" in str(e)
            log.write(json.dumps({"k": "error", "t": time.monotonic(), "msg": str(e)[:200]}) + "\n")
    log.write(json.dumps({"k": "counts", "safety": dict(env.safety.counts)}) + "\n")
    env.close()


def monitor(out: Path, seconds: float) -> None:
    """Robot host: every command that reaches the robot (receive time) and every state the
    robot reports (header stamp, TCP), for the receiver-side limit check."""
    from robot_bridge import ros_types as rt
    from robot_bridge.transport import COMMAND_QOS
    from robot_bridge.transport_factory import make_transport

    log = open(out, "a", buffering=1)
    tr = make_transport("dds", node_name="cmd_monitor")
    seen: set[float] = set()

    def on_state(msg) -> None:
        stamp = rt.stamp_seconds(msg.header.stamp)
        if stamp not in seen:  # heartbeats repeat a state with its stamp
            seen.add(stamp)
            log.write(json.dumps({"k": "state", "stamp": stamp, "tcp": [float(v) for v in msg.position[:3]]}) + "\n")

    tr.subscribe("/joint_states", "sensor_msgs/msg/JointState", COMMAND_QOS, callback=on_state)
    tr.subscribe("/cmd", "std_msgs/msg/Float64MultiArray", COMMAND_QOS, callback=lambda m: log.write(
        json.dumps({"k": "recv", "t": time.monotonic(), "a": [float(v) for v in m.data]}) + "\n"))
    time.sleep(seconds)
    tr.close()


def pair(recv: list[dict], sent: list[dict]) -> list[tuple[dict, dict]]:
    """Each received command with the send record it is: commands travel reliably and in order
    from one writer, so the received ones are the sent ones in order, some possibly missing
    (hold commands repeat values, so values alone do not say which one)."""
    out, j = [], 0
    for r in recv:
        while j < len(sent) and sent[j]["a"] != r["a"]:
            j += 1
        assert j < len(sent), f"the robot received a command the learner did not send (or out of order): {r}"
        out.append((r, sent[j]))
        j += 1
    return out


def outside_limits(pairs: list[tuple[dict, dict]], states: list[dict]) -> list[dict]:
    """The received commands that break a limit for the robot state they acted on: the newest
    state the robot reported with a stamp before the command was sent (the twin steps once per
    command, so the next state is stamped after the command arrived)."""
    from robot_bridge.safety import SafetyFilter

    checker = SafetyFilter(safety())
    states = sorted(states, key=lambda s: s["stamp"])
    stamps = np.array([s["stamp"] for s in states])
    bad = []
    for r, s in pairs:
        i = int(np.searchsorted(stamps, s["wall"])) - 1
        tcp = states[i]["tcp"] if i >= 0 else [np.nan] * 3
        if not checker.within_limits(r["a"], tcp):
            bad.append({**r, "tcp": tcp, "sent": s})
    return bad


# ---------------------------------------------------------------------- the test
@pytest.fixture
def two_hosts(tmp_path):
    why = unavailable()
    if why:
        pytest.skip(f"two hosts: {why}")
    hosts = TwoHosts(tmp_path)
    try:
        try:
            hosts.up()
        except (subprocess.CalledProcessError, OSError) as e:  # only a refused capability skips
            said = f"{e} {getattr(e, 'stderr', '') or ''}"
            if not any(w in said for w in ("Operation not permitted", "Permission denied", "EPERM")):
                raise
            pytest.skip(f"two hosts: network namespaces refused here ({said.strip()[:200]})")
        yield hosts
    finally:
        left = hosts.down()
    assert left == [], f"namespaces left behind: {left}"


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _wait_for(path: Path, kind: str, procs, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(r["k"] == kind for r in _read(path)):
            return
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, f"a host process ended early (exit {dead[0].returncode})"
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout:.0f} s")


def test_robot_and_learner_on_two_hosts_through_link_faults(two_hosts, tmp_path):
    h = two_hosts
    dom = random.randrange(233)  # any domain: the hosts see nothing but each other
    env_r, env_l = h.dds_env(h.robot, dom), h.dds_env(h.learner, dom)
    for e in (env_r, env_l):
        e.update(PYTHONPATH=str(ROOT), MUJOCO_GL="egl")
    learn_log, mon_log, stop = tmp_path / "learner.jsonl", tmp_path / "monitor.jsonl", tmp_path / "stop"
    py = sys.executable
    procs = [h.start(h.robot, [py, "-m", "embodied.cli", "robot-sim", "Reach", "--image-size", "0", "--rate", "20",
                               "--transport", "dds"], env_r, tmp_path / "robot.log"),
             h.start(h.robot, [py, __file__, "monitor", str(mon_log), "--seconds", "60"], env_r, tmp_path / "mon.log")]
    _wait_for(mon_log, "state", procs, 40.0, "the monitor saw no state of the twin on the robot host")
    procs.append(h.start(h.learner, [py, __file__, "learner", str(learn_log), "--stop", str(stop), "--seconds", "60"],
                         env_l, tmp_path / "learner.log"))
    _wait_for(learn_log, "ready", procs, 40.0, "the learner did not reset the twin across the link")
    marks, down, packets = [], False, []
    for name, faults, want_down, seconds in PHASES:
        t = h.link.set(**faults)
        if want_down != down:
            t, down = h.set_down(h.learner, want_down), want_down
        marks.append((name, t))
        packets.append((h.link.sent, h.link.dropped))
        time.sleep(seconds)
    marks.append(("end", time.monotonic()))
    packets.append((h.link.sent, h.link.dropped))
    link = {name: {"forwarded": s1 - s0, "dropped": d1 - d0}  # the link's packets, phase by phase
            for (name, *_), (s0, d0), (s1, d1) in zip(PHASES, packets, packets[1:])}
    stop.touch()
    procs[2].wait(15)

    rows = _read(learn_log)
    sent = [r for r in rows if r["k"] == "cmd"]
    steps = [r for r in rows if r["k"] == "step"]
    recv = [r for r in _read(mon_log) if r["k"] == "recv"]
    pairs = pair(recv, sent)
    bad = outside_limits(pairs, [r for r in _read(mon_log) if r["k"] == "state"])
    phase = {name: (t0, t1) for (name, t0), (_, t1) in zip(marks, marks[1:])}
    table = {}
    for name, (t0, t1) in phase.items():
        transit = [r["t"] - s["t"] for r, s in pairs if t0 + 0.3 <= s["t"] < t1]
        n_steps = sum(1 for s in steps if t0 <= s["t0"] and s["t1"] < t1)
        table[name] = {"steps": n_steps, "steps_per_s": n_steps / (t1 - t0), "commands_received": len(transit),
                       "transit_ms_median": 1e3 * float(np.median(transit)) if transit else None,
                       "transit_ms_p95": 1e3 * float(np.percentile(transit, 95)) if transit else None}
    faults = {}
    for fault, after in FAULTS:  # when commanding stopped, when it resumed
        cut0, cut1 = phase[fault]
        last_before = max(s["t"] for s in sent if s["t"] < cut0)
        during = [s["t"] for s in sent if cut0 <= s["t"] < cut1]
        resumed = [r["t"] for r, s in pairs if s["t"] >= cut1]
        faults[fault] = {"time_to_stop_s": max([last_before, *during]) - cut0,  # <= 0: none sent once cut
                         "sent_during": len(during), "last_sent_after_start_s": max(during, default=cut0) - cut0,
                         "time_to_resume_s": min(resumed) - cut1 if resumed else float("inf"),
                         "sent_before_delivered_after": sum(1 for r, s in pairs if r["t"] >= cut1 and s["t"] < cut1),
                         "steps_after": table[after]["steps"]}
    counts = next((r["safety"] for r in rows if r["k"] == "counts"), {})
    summary = {"phases": table, "faults": faults, "commands_received": len(recv), "outside_limits": len(bad),
               "errors": [r["msg"][:90] for r in rows if r["k"] == "error"][:6], "safety_counts": counts,
               "link": link}
    print("\ntwo hosts:", json.dumps(summary, indent=1))

    assert table["clean"]["steps"] >= 20  # discovery across the link: the learner drives the twin
    assert bad == [] and len(recv) > 100
    assert counts.get("nonfinite", 0) > 0 and counts.get("range", 0) > 0  # hostile actions were filtered
    d = table["delay 50 ms"]
    assert d["steps"] >= 10 and 50 <= d["transit_ms_median"] < 150  # one way: the link's 50 ms
    assert table["loss 5 %"]["steps"] >= 10
    lossy = link["loss 5 %"]  # the faults did happen: packets were dropped, about as many as set
    assert lossy["dropped"] > 0 and 0.01 < lossy["dropped"] / (lossy["dropped"] + lossy["forwarded"]) < 0.15, link
    cut = link["cut 3 s"]  # (a packet read as the cut began may still pass)
    assert link["clean"]["dropped"] == 0 and cut["forwarded"] <= 2 and cut["dropped"] > 50, link
    for fault, f in faults.items():
        assert f["time_to_stop_s"] <= WATCHDOG_S + 2 / CONTROL_HZ, fault  # the watchdog stops commanding
        assert f["last_sent_after_start_s"] <= WATCHDOG_S + 2 / CONTROL_HZ, fault  # and nothing more is sent
        assert f["time_to_resume_s"] < 3.0 and f["steps_after"] >= 10, fault  # the run goes on

def test_a_late_reply_does_not_leave_the_safety_filter_a_step_behind(dds_env):
    """Loopback, deterministic: the robot's reply to a command comes after obs_timeout_s (what a
    cut link does). The next command must be checked against where the robot is then, not the
    observation of before (one step behind: near a workspace wall that overshoots by a step),
    and the env must be back in lock step. Before the fix the robot saw commands beyond the box."""
    import threading

    import torch

    from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
    from robot_bridge.safety import SafetyConfig, SafetyFilter
    from sims.vecenv import EnvError
    from test_bridge_robot_env import FakeRobot

    class LateRobot(FakeRobot):
        """Publishes nothing while `paused`; then the state it reached meanwhile."""

        def __init__(self, *a, **kw):
            self.paused, self.pending = threading.Event(), False
            super().__init__(*a, **kw)

        def publish(self, new_state: bool = True) -> None:
            if self.paused.is_set():
                self.pending = self.pending or new_state
                return
            new_state, self.pending = new_state or self.pending, False
            super().publish(new_state)

    robot = LateRobot(checker=SafetyFilter(SafetyConfig()))
    env = RobotEnv(RobotEnvConfig(success="classifier", max_episode_steps=10**6, transport="dds", obs_timeout_s=0.5,
                                  control_hz=50.0, safety=SafetyConfig(control_hz=50.0)), success_fn=lambda o: False)
    up = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    try:
        env.reset(seed=0)
        for _ in range(5):
            env.step(up)
        robot.paused.set()
        with pytest.raises(EnvError, match="no new /joint_states"):
            env.step(up)  # sent, and the robot moved, but its state comes late
        robot.paused.clear()
        for _ in range(12):  # towards the wall at z = 0.30
            obs = env.step(up).obs
            time.sleep(0.05)  # let a late state, if any, arrive before the next command
            assert abs(float(obs["state"][0, 2]) - robot.tcp[2]) < 1e-6  # back in lock step (float32 obs)
        assert robot.violations == [] and robot.tcp[2] == pytest.approx(0.30)
    finally:
        env.close()
        robot.close()


def test_a_late_command_is_answered_before_the_next_one_is_checked(dds_env):
    """Loopback, deterministic: a command reaches the robot late (held in transit, as reliable
    QoS delivers it once a cut link returns), after its step gave up, while the robot's
    heartbeats keep the old state fresh. The next command must wait for that command's answer
    and be checked where it took the robot; before, it was checked against the old state and,
    at the workspace wall, the robot received a command a step beyond the box."""
    import threading

    import torch

    from robot_bridge.robot_env import RobotEnv, RobotEnvConfig
    from robot_bridge.safety import SafetyConfig, SafetyFilter
    from sims.vecenv import EnvError
    from test_bridge_robot_env import FakeRobot

    class SlowLink(FakeRobot):
        """Commands wait (in order) while `holding`; heartbeats of the old state go on."""

        def __init__(self, *a, **kw):
            self.holding, self.held = threading.Event(), []
            super().__init__(*a, **kw)

        def _on_cmd(self, msg) -> None:
            if self.holding.is_set():
                self.held.append(msg)
            else:
                super()._on_cmd(msg)

        def release(self) -> None:
            self.holding.clear()
            for m in self.held:
                super()._on_cmd(m)

    robot = SlowLink(checker=SafetyFilter(SafetyConfig()))
    env = RobotEnv(RobotEnvConfig(success="classifier", max_episode_steps=10**6, transport="dds", obs_timeout_s=0.5,
                                  control_hz=50.0, safety=SafetyConfig(control_hz=50.0)), success_fn=lambda o: False)
    up = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    try:
        env.reset(seed=0)
        for _ in range(9):  # z 0.10 -> 0.28, one step below the wall at 0.30
            env.step(up)
        robot.holding.set()
        with pytest.raises(EnvError, match="no new /joint_states"):
            env.step(up)  # the command is in transit; the robot's heartbeats say z = 0.28
        threading.Timer(0.2, robot.release).start()
        obs = env.step(up).obs  # waits for the held command's answer (z = 0.30), then holds z
        assert robot.violations == [] and robot.tcp[2] == pytest.approx(0.30)
        assert abs(float(obs["state"][0, 2]) - robot.tcp[2]) < 1e-6
    finally:
        env.close()
        robot.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=("learner", "monitor"))
    p.add_argument("out", type=Path)
    p.add_argument("--stop", type=Path)
    p.add_argument("--seconds", type=float, default=60.0)
    args = p.parse_args()
    if args.role == "learner":
        learner(args.out, args.stop, args.seconds)
    else:
        monitor(args.out, args.seconds)
