"""`embodied sim2real`: results.json complete and the report remade from it, bad input named in
one line before anything runs, and the twin over real DDS in a second process (seeded resets:
a twin without a reality gap repeats the simulation episode for episode)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied.cli import main
from embodied.eval.results_file import PROTOCOL_KEYS

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 12


@pytest.fixture(scope="module")
def reach_run(tmp_path_factory):
    """A Reach run of 4 PPO iterations of 32 envs, a checkpoint after each: some successes, not all."""
    from embodied.config import load_config
    from embodied.rl.train import train

    run_dir = tmp_path_factory.mktemp("reach_run")
    train(load_config(ROOT / "configs" / "ppo" / "ppo_reach.yaml",
                      ["train.total_steps=4096", f"train.run_dir={run_dir}", "train.progress=false",
                       "train.eval_every=0", "train.eval_episodes=4", "train.video_episodes=0",
                       "train.save_every=1", "env.num_envs=32"]))
    return run_dir


def _sim2real(args: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["sim2real", *args])
    return rc, capsys.readouterr().err.strip()


def test_results_complete_and_report_remade(reach_run, tmp_path, capsys):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("friction: [0.3, 1.0]\nlatency_steps: [2]\n")
    ckpts = [str(reach_run / "checkpoints" / f"iter_{i:06d}") for i in (1, 4)]
    out = tmp_path / "report"
    capsys.readouterr()
    rc = main(["sim2real", *ckpts, "--task", "Reach", "--sweep", str(sweep), "--trials", str(TRIALS),
               "--num-envs", "6", "--out", str(out)])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    data = json.loads((out / "results.json").read_text())
    conds = ["nominal", "friction=0.3", "friction=1", "latency_steps=2"]
    assert list(data["conditions"]) == conds
    assert data["conditions"]["friction=0.3"] == {"kind": "sweep", "axis": "friction", "value": 0.3}
    eps = data["episodes"]
    assert len(eps) == 2 * len(conds) * TRIALS
    labels = {e["checkpoint"] for e in eps}
    assert labels == {f"{reach_run.name}/iter_000001", f"{reach_run.name}/iter_000004"}
    for label in labels:
        for c in conds:
            mine = [e for e in eps if e["checkpoint"] == label and e["condition"] == c]
            assert [e["seed"] for e in mine] == list(range(1_000_000, 1_000_000 + TRIALS))
            assert [e["run"] for e in mine] == [i // 10 for i in range(TRIALS)]
            assert all(e["task"] == "Reach" and 1 <= e["length"] <= 50 for e in mine)
            assert all(e["length"] == 50 for e in mine if not e["success"])  # a failure runs to the end
    assert any(e["success"] for e in eps) and not all(e["success"] for e in eps)
    protocol = data["protocol"]
    assert set(PROTOCOL_KEYS) <= set(protocol)
    assert protocol["seeds"] == list(range(1_000_000, 1_000_000 + TRIALS)) and protocol["trials_per_condition"] == TRIALS
    assert protocol["chunk_size"] == 1 and protocol["control_hz"] == 20.0
    assert protocol["sweep"] == {"friction": [0.3, 1.0], "latency_steps": [2.0]}
    # A two-step delay costs the trained checkpoint episodes or steps: the condition took effect.
    last = f"{reach_run.name}/iter_000004"
    nominal = [e for e in eps if e["checkpoint"] == last and e["condition"] == "nominal"]
    delayed = [e for e in eps if e["checkpoint"] == last and e["condition"] == "latency_steps=2"]
    assert [(e["success"], e["length"]) for e in nominal] != [(e["success"], e["length"]) for e in delayed]
    # Videos: the first failure of each simulated condition that had one.
    failed = {e["condition"] for e in eps if not e["success"]}
    videos = sorted(p.name for p in (out / "videos").glob("*.mp4"))
    assert len(videos) == len(failed) and all(p.stat().st_size > 1000 for p in (out / "videos").glob("*.mp4"))
    report = (out / "report.md").read_text()
    assert "## Sweeps" in report and (out / "sweep_friction.png").is_file() and videos[0] in report
    # The two checkpoints compared on the same seeds: the paired difference, counted by hand here.
    first, other = sorted(labels)
    printed = [x for x in printed.out.splitlines() if x.startswith("paired: ")]
    assert len(printed) == len(conds), printed
    for c, line in zip(conds, printed):
        x = {e["seed"]: e["success"] for e in eps if e["checkpoint"] == first and e["condition"] == c}
        y = {e["seed"]: e["success"] for e in eps if e["checkpoint"] == other and e["condition"] == c}
        only_other, only_first = sum(y[s] and not x[s] for s in x), sum(x[s] and not y[s] for s in x)
        assert line.startswith(f"paired: {other} - {first} on Reach ({c}, {TRIALS} paired seeds): "
                               f"{(only_other - only_first) / TRIALS:+.2f} ["), line
        assert f"{only_other} seeds only {other} solved, {only_first} only {first})" in line, line
    assert "## Between checkpoints: paired difference on the same seeds" in report
    # `embodied report DIR` remakes the same report from results.json alone.
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").read_text() == report


@pytest.mark.parametrize("extra, sweep, field", [
    ([], "frcition: [0.5]\n", "sweep: unknown key 'frcition'; allowed: friction"),
    ([], "mass: [1.0, -0.5]\n", "sweep.mass: -0.5 is outside physical sense"),
    ([], "friction: [-0.1]\n", "sweep.friction: -0.1 is outside physical sense"),
    (["--robot", "ROBOT"], None, "robot.image_topics: cameras ['front'] do not match checkpoint"),
    (["--twin", "no_such_preset"], None, "--twin: reality: no preset 'no_such_preset'"),
    (["--task", "PushCube"], None, "--task: 'PushCube' does not match checkpoint"),
])
def test_bad_input_is_one_line_naming_the_field(reach_run, tmp_path, capsys, extra, sweep, field):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("earlier results\n")  # a bad call loses nothing
    args = [str(reach_run), "--task", "Reach", "--trials", "4", "--out", str(out)]
    if sweep is not None:
        (tmp_path / "sweep.yaml").write_text(sweep)
        args += ["--sweep", str(tmp_path / "sweep.yaml")]
    robot = tmp_path / "robot.yaml"  # a camera robot for a state checkpoint
    robot.write_text("image_topics: {front: /camera/image_raw}\nprivileged_topic: /privileged\n"
                     "privileged_dim: 15\n")
    args += [str(robot) if a == "ROBOT" else a for a in extra]
    rc, err = _sim2real(args, capsys)
    assert rc == 2
    assert len(err.splitlines()) == 1 and field in err, err
    assert (out / "results.json").read_text() == "earlier results\n" and not (out / "report.md").exists()


def test_twin_over_dds_repeats_simulation_seed_for_seed(reach_run, tmp_path, capsys, dds_env):
    """The twin (`embodied robot-sim`, a second process, real DDS on loopback) with a preset of
    no differences: seeded resets start it where the simulation started, so every episode's
    outcome and length match. With twin_gap's differences the same seeds give other episodes."""
    preset = tmp_path / "no_gap.yaml"
    preset.write_text("description: nominal\nvalues: {}\n")
    ckpt = str(reach_run / "checkpoints" / "iter_000004")
    for name in ("no_gap", "twin_gap"):
        out = tmp_path / name
        twin = str(preset) if name == "no_gap" else name
        videos = ["--no-videos"] if name == "no_gap" else []  # twin_gap: the twin renders for the video
        rc, err = _sim2real([ckpt, "--task", "Reach", "--twin", twin, "--trials", "8", "--num-envs", "8",
                             *videos, "--out", str(out)], capsys)
        assert rc == 0, err
        data = json.loads((out / "results.json").read_text())
        assert "robot-sim: Reach on domain" in (out / "twin.log").read_text()  # its own process
        sim = [(e["seed"], e["success"], e["length"]) for e in data["episodes"] if e["condition"] == "nominal"]
        twin_eps = [(e["seed"], e["success"], e["length"]) for e in data["episodes"]
                    if e["condition"] == f"twin:{name}"]
        assert len(sim) == len(twin_eps) == 8
        assert data["protocol"]["robot"]["preset"] == name
        if name == "no_gap":
            assert twin_eps == sim
            assert data["protocol"]["robot_safety_interventions"][f"{reach_run.name}/iter_000004"].keys() <= {"range", "workspace"}
        else:
            assert twin_eps != sim
            assert "## Sim-to-real gap" in (out / "report.md").read_text()
            _check_robot_video(out, twin_eps, "twin_twin_gap")


def test_twin_serves_a_policy_of_two_cameras(tmp_path, capsys, dds_env):
    """The twin publishes every camera of the task (front on /camera/image_raw, wrist under
    /camera/wrist/): a CNN that reads both sees the twin's frames, and without a reality gap its
    episodes repeat the simulation's seed for seed."""
    from embodied.config import load_config
    from embodied.rl.train import train

    run_dir = tmp_path / "run"
    train(load_config(ROOT / "configs" / "ppo" / "ppo_pushcube_rgb.yaml",
                      ["env.task=Reach", "env.cameras=[front,wrist]", "env.image_size=48", "env.num_envs=4",
                       "ppo.rollout_steps=8", "train.total_steps=32", f"train.run_dir={run_dir}",
                       "train.progress=false", "train.eval_every=0", "train.video_episodes=0", "train.save_every=1"]))
    preset = tmp_path / "no_gap.yaml"
    preset.write_text("description: nominal\nvalues: {}\n")
    out = tmp_path / "out"
    rc, err = _sim2real([str(run_dir / "checkpoints" / "iter_000001"), "--task", "Reach", "--twin", str(preset),
                         "--trials", "4", "--num-envs", "4", "--no-videos", "--out", str(out)], capsys)
    assert rc == 0, err
    episodes = json.loads((out / "results.json").read_text())["episodes"]
    sim = [(e["seed"], e["success"], e["length"]) for e in episodes if e["condition"] == "nominal"]
    twin = [(e["seed"], e["success"], e["length"]) for e in episodes if e["condition"] == "twin:no_gap"]
    assert len(sim) == 4 and twin == sim


def _check_robot_video(out, episodes, prefix):
    """The first failed robot episode's video: the reset's frame and one per step,
    from the twin's front camera (64 x 64) although the policy reads no camera; listed in the report."""
    import av
    import numpy as np

    failed = [(seed, length) for seed, success, length in episodes if not success]
    assert failed, "the test needs a failed robot episode"
    seed, length = failed[0]
    path = out / "videos" / f"{prefix}_seed{seed}.mp4"
    assert sorted(p.name for p in (out / "videos").glob(f"{prefix}_*.mp4")) == [path.name]
    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == length + 1 and frames[0].shape == (64, 64, 3)
    assert np.stack(frames).astype(float).std() > 5  # not a blank picture
    assert path.name in (out / "report.md").read_text()


def test_robot_config_file_drives_a_robot_over_dds(reach_run, tmp_path, capsys, dds_env):
    """--robot: a RobotEnvConfig YAML, here pointing at a nominal twin started by the test (as a
    real robot's driver would be); seeded topic resets, so it repeats the simulation."""
    import os
    import subprocess
    import sys

    robot = tmp_path / "robot.yaml"
    robot.write_text("task: Reach\nprivileged_topic: /privileged\nprivileged_dim: 15\ncontrol_hz: 200\n"
                     "max_episode_steps: 50\ntransport: dds\nreset_timeout_s: 60\nobs_timeout_s: 5\n"
                     "safety: {control_hz: 200}\n")
    sim = subprocess.Popen([sys.executable, "-m", "embodied.cli", "robot-sim", "Reach", "--transport", "dds",
                            "--image-size", "0"], env={**os.environ, "MUJOCO_GL": "egl"}, cwd=ROOT)
    try:
        out = tmp_path / "out"
        rc, err = _sim2real([str(reach_run), "--task", "Reach", "--robot", str(robot), "--trials", "6",
                             "--no-videos", "--out", str(out)], capsys)
    finally:
        sim.terminate()
        sim.wait(10)
    assert rc == 0, err
    data = json.loads((out / "results.json").read_text())
    assert data["conditions"]["robot"] == {"kind": "robot"} and data["protocol"]["robot"]["kind"] == "robot"
    eps = data["episodes"]
    pick = (lambda c: [(e["seed"], e["success"], e["length"]) for e in eps if e["condition"] == c])
    assert len(pick("robot")) == 6 and pick("robot") == pick("nominal")


def test_robot_that_does_not_answer_keeps_the_simulated_episodes(reach_run, tmp_path, capsys, dds_env):
    robot = tmp_path / "robot.yaml"  # nothing serves these topics
    robot.write_text("task: Reach\nprivileged_topic: /privileged\nprivileged_dim: 15\ntransport: dds\n"
                     "reset_timeout_s: 1\nnamespace: /nobody\n")
    out = tmp_path / "out"
    rc, err = _sim2real([str(reach_run), "--task", "Reach", "--robot", str(robot), "--trials", "4",
                         "--no-videos", "--out", str(out)], capsys)
    assert rc == 2 and len(err.splitlines()) == 1
    assert "robot: the policy needs state, privileged, which the robot does not give" in err  # checked at start
    assert "nothing on /nobody/joint_states" in err and "results.json" in err
    data = json.loads((out / "results.json").read_text())
    assert [e["condition"] for e in data["episodes"]] == ["nominal"] * 4 and (out / "report.md").is_file()


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
def test_maniskill_checkpoint_sweeps_its_knobs(tmp_path, capsys):
    """A ManiSkill checkpoint sweeps the knobs ManiSkill supports (mass: per env on physx_cpu);
    a knob it lacks, or the MuJoCo twin, is a one-line error before anything runs."""
    from embodied.config import load_config
    from embodied.rl.train import train

    run_dir = tmp_path / "ms_run"  # one PPO iteration: an untrained policy is enough here
    train(load_config(ROOT / "configs" / "ppo" / "ppo_ms_pushcube.yaml",
                      ["train.total_steps=16", f"train.run_dir={run_dir}", "train.progress=false",
                       "train.eval_every=0", "train.eval_episodes=2", "train.save_every=1",
                       "env.num_envs=2", "env.num_threads=1", "ppo.rollout_steps=8", "ppo.minibatches=2"]))
    base = [str(run_dir), "--task", "ms:PushCube-v1", "--trials", "2", "--num-envs", "2", "--no-videos"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("camera_pos: [0.01]\n")
    rc, err = _sim2real([*base, "--sweep", str(bad), "--out", str(tmp_path / "bad")], capsys)
    assert rc == 2 and err.endswith("sweep: key 'camera_pos' is not supported for ManiSkill tasks; allowed: "
                                    "friction, mass, actuator_gain, latency_steps, action_noise, obs_noise"), err
    rc, err = _sim2real([*base, "--twin", "dynamics_only", "--out", str(tmp_path / "bad")], capsys)
    assert rc == 2 and "--twin: the twin (embodied robot-sim) runs the MuJoCo tasks" in err, err
    assert not (tmp_path / "bad" / "results.json").exists()
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("mass: [2.0]\n")
    out = tmp_path / "out"
    rc, err = _sim2real([*base, "--sweep", str(sweep), "--out", str(out)], capsys)
    assert rc == 0, err
    data = json.loads((out / "results.json").read_text())
    assert list(data["conditions"]) == ["nominal", "mass=2"] and len(data["episodes"]) == 4
    assert {"mani_skill", "sapien"} <= set(data["protocol"]["simulator_versions"])
