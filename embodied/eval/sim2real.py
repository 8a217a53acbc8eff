"""`embodied sim2real CHECKPOINT... --task T [--twin PRESET | --robot FILE] [--sweep FILE] --out DIR`.

Every checkpoint is evaluated on the same seeds (embodied.run.env.eval_seeds: the seeds of
`embodied eval` and `embodied serve`), one episode per seed, deterministic actions:
  nominal        simulation without randomisation, batched (--num-envs envs at once);
  <knob>=<v>     simulation with one knob fixed at v, for each value of each axis of the sweep
                 file (YAML {knob: [v1, v2, ...]}, the knobs of sims/mujoco/randomization.py;
                 for ManiSkill tasks those of sims/maniskill/randomization.py);
  twin:<preset>  the twin (`embodied robot-sim --reality PRESET`) over ROS 2 DDS in a second
                 process, or `robot` for a real robot (--robot, a RobotEnvConfig YAML); seeded
                 resets, so each robot episode starts where the simulated one with that seed did.
It writes DIR/results.json (every episode and the protocol), videos of the first failure per
simulated condition (DIR/videos/), and the report (embodied/eval/report.py: DIR/report.md, PNGs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import yaml

from embodied.eval.candidates import Checkpoint, load_checkpoints, versions
from embodied.run.stop import command_line
from embodied.eval.sim2real_robot import Sim2RealError, Twin, observed_cameras, robot_config_from_file, run_robot
from embodied.run.device import policy_act, resolve_device
from sims.family import family_of

SUCCESS = ("the task's success predicate (sims/mujoco/tasks/; ManiSkill's `success`) holds at some control step; "
           "the episode ends there (terminated) or after the task's max_episode_steps (a failure)")
RUN_SIZE = 10  # consecutive evaluation seeds per run: the unit of the IQM's bootstrap


def _view(ck: Checkpoint) -> tuple:
    """(cameras, image size) the checkpoint's policy reads; ((), 0) for a state policy."""
    cams = observed_cameras(ck.cfg)
    return cams, ck.cfg.env.image_size if cams else 0


def sweep_knobs(task: str) -> tuple[str, ...]:
    """The knobs a sweep of `task` may name (its family's: all of them for MuJoCo, ManiSkill's subset)."""
    return family_of(task).knobs(task)


def load_sweep(path: str | Path | None, task: str = "") -> dict[str, list[float]]:
    """A sweep file {knob: [v1, v2, ...]} -> the same, validated (one-line Sim2RealError naming the field)."""
    from sims.mujoco.randomization import RandomizationError, from_values

    knobs = sweep_knobs(task)

    if path is None:
        return {}
    path = Path(path)
    if not path.is_file():
        raise Sim2RealError(f"--sweep: {path} does not exist (a YAML mapping knob: [v1, v2, ...])")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise Sim2RealError(f"--sweep: {path} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict) or not raw:
        raise Sim2RealError(f"sweep: expected a mapping knob: [v1, v2, ...], got {raw!r:.80}")
    sweep = {}
    for knob, values in raw.items():
        if knob not in knobs:
            what = (f"unknown key {knob!r}" if knob not in sweep_knobs("")
                    else f"key {knob!r} is not supported for ManiSkill tasks")
            raise Sim2RealError(f"sweep: {what}; allowed: {', '.join(knobs)}")
        if not isinstance(values, list) or not values:
            raise Sim2RealError(f"sweep.{knob}: expected a non-empty list of values, got {values!r}")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise Sim2RealError(f"sweep.{knob}: expected numbers (a vector knob's value applies to each "
                                    f"component), got {v!r}")
            try:
                from_values({knob: v}, "sweep")
            except RandomizationError as e:
                raise Sim2RealError(str(e)) from None
        sweep[knob] = [float(v) for v in values]
    return sweep


def conditions_of(sweep: dict[str, list[float]], robot: str | None) -> dict[str, dict]:
    """results.json conditions: name -> {"kind", "axis"?, "value"?} (nominal, sweeps, robot last)."""
    conds = {"nominal": {"kind": "nominal"}}
    for knob, values in sweep.items():
        for v in values:
            conds[f"{knob}={v:g}"] = {"kind": "sweep", "axis": knob, "value": v}
    if robot is not None:
        conds[robot] = {"kind": "robot"}
    return conds


def sim_env(ck: Checkpoint, cond: dict, num_envs: int) -> Any:
    """The checkpoint's own observation setup; no randomisation, or the one swept knob fixed."""
    from embodied.run.env import build_env

    block = None
    if cond["kind"] == "sweep":
        block = {cond["axis"]: [cond["value"], cond["value"]]}
    env_cfg = dataclasses.replace(ck.cfg.env, randomization=block, reality=None, num_threads=1)
    return build_env(env_cfg, num_envs)


def run_sim(ck: Checkpoint, cond: dict, seeds: list[int], num_envs: int) -> tuple[list[bool], list[int], int]:
    """Batched episodes: (successes [N], lengths [N] in control steps, chunk size K)."""
    from embodied.eval.evaluate import evaluate

    env = sim_env(ck, cond, min(num_envs, len(seeds)))
    try:
        res = evaluate(ck.policy, env, seeds)
        obs, _ = env.reset(seed=list(range(env.num_envs)))
        chunk = int(policy_act(ck.policy, obs).actions.shape[1])
    finally:
        env.close()
    return res.successes, res.lengths, chunk


def first_failure_video(ck: Checkpoint, cond: dict, seed: int, path: Path) -> Path | None:
    """Re-run one failed seed in a 1-env simulation (same seed, same condition) and record it."""
    from embodied.eval.evaluate import evaluate

    path.parent.mkdir(parents=True, exist_ok=True)
    env = sim_env(ck, cond, 1)
    try:
        return evaluate(ck.policy, env, [seed], video_path=path, video_episodes=1).video
    finally:
        env.close()


def protocol_of(cks: list[Checkpoint], task: str, seeds: list[int], sweep: dict, robot: dict | None,
                chunk: dict[str, int], num_envs: int) -> dict:
    from embodied.run.env import build_env

    spec_env = build_env(dataclasses.replace(cks[0].cfg.env, randomization=None, reality=None), 1)
    control_hz, max_steps = spec_env.spec.control_hz, spec_env.spec.max_episode_steps
    spec_env.close()
    config = {"task": task, "seeds": seeds, "sweep": sweep, "robot": robot, "deterministic": True,
              "checkpoints": {c.label: dataclasses.asdict(c.cfg) for c in cks}}
    toolkit, sims = versions(task)
    ks = sorted(set(chunk.values()))
    return {
        "seeds": seeds,
        "trials_per_condition": len(seeds),
        "chunk_size": ks[0] if len(ks) == 1 else chunk,
        "executed_steps": "every action of each chunk (an episode may end inside a chunk)",
        "control_hz": control_hz,
        "max_episode_steps": max_steps,
        "success": SUCCESS,
        "actions": "deterministic (the policy's mean / argmax)",
        "run": f"a block of {RUN_SIZE} consecutive seeds (the `run` field; the unit of the IQM interval)",
        "sim_envs_per_batch": num_envs,
        "robot": robot,
        "sweep": sweep,
        "checkpoints": {c.label: c.path.name for c in cks},
        "toolkit_version": toolkit,
        "simulator_versions": sims,
        "config_hash": hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16],
    }


def sim2real(checkpoints: list[str], task: str, out: str | Path, trials: int = 100, sweep_file: str | None = None,
             twin: str | None = None, robot_file: str | None = None, num_envs: int = 64, videos: bool = True,
             log=print, device: str = "auto") -> Path:
    """Evaluate, write out/results.json and out/report.md; returns the report's path."""
    from embodied.eval.report import write_report
    from embodied.eval.results_file import write_results
    from embodied.run.env import eval_seeds
    from sims.mujoco.randomization import RandomizationError, load_preset

    if trials < 1 or num_envs < 1:
        raise Sim2RealError(f"--trials, --num-envs: expected >= 1, got {trials}, {num_envs}")
    if twin and robot_file:
        raise Sim2RealError("--twin, --robot: give one robot, the twin or a real robot's config")
    family = family_of(task)
    if family.protocol is not None:  # a benchmark's published protocol: every task, fixed seeds, mean over tasks
        from embodied.eval.suite_protocol import run_checkpoints

        if sweep_file or twin or robot_file:
            raise Sim2RealError(f"--sweep, --twin, --robot: {task} has no randomisation knobs and no twin; "
                                f"allowed: none of them ({family.doc})")
        p = family.protocol
        if trials > p.max_seeds:
            raise Sim2RealError(f"--trials: {trials}; {p.seeds_limit}, allowed: 1..{p.max_seeds}")
        return run_checkpoints(checkpoints, task, out, trials, num_envs=min(num_envs, p.max_envs or num_envs), log=log)
    if twin and not family.twin:
        raise Sim2RealError(f"--twin: the twin (embodied robot-sim) runs the MuJoCo tasks; {task} has none; "
                            f"allowed: --robot FILE, or no robot")
    sweep = load_sweep(sweep_file, task)  # every input is checked before anything runs
    robot, robot_name = None, None
    if twin:
        try:
            preset = load_preset(twin)
        except RandomizationError as e:
            raise Sim2RealError(f"--twin: {e}") from None
        robot = {"kind": "twin", "preset": preset.name,
                 "values": {k: v.tolist() for k, v in preset.low.items()}, "transport": "dds (loopback)"}
        robot_name = f"twin:{preset.name}"
    resolve_device(device, "--device")  # a bad --device fails before anything runs
    cks = load_checkpoints(checkpoints, task, device)
    for c in cks if twin else []:  # one twin process serves every checkpoint
        if _view(c) != _view(cks[0]):
            raise Sim2RealError(f"--twin: checkpoint {c.label} sees {_view(c)}, {cks[0].label} sees "
                                f"{_view(cks[0])} (cameras, image size); allowed: one view for every checkpoint")
    robot_cfgs = {}
    if robot_file:
        robot_cfgs = {c.label: robot_config_from_file(robot_file, c.cfg, c.label, c.policy.record) for c in cks}
        robot = {"kind": "robot", "config": yaml.safe_load(Path(robot_file).read_text())}
        robot_name = "robot"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in (out / "videos").glob("*.mp4"):  # the report lists every mp4 of the folder
        old.unlink()
    seeds = eval_seeds(trials)
    conds = conditions_of(sweep, robot_name)
    episodes: list[dict] = []
    chunk: dict[str, int] = {}
    failed: dict[str, tuple[Checkpoint, int]] = {}

    def record(ck: Checkpoint, name: str, succ: list[bool], lengths: list[int]) -> None:
        for i, (s, n) in enumerate(zip(succ, lengths)):
            episodes.append({"checkpoint": ck.label, "condition": name, "task": task, "seed": seeds[i],
                             "success": bool(s), "length": int(n), "run": i // RUN_SIZE})
            if not s and name not in failed:
                failed[name] = (ck, seeds[i])
        log(f"  {ck.label:32s} {name:24s} success {sum(succ)}/{len(succ)}")

    from embodied.run.stop import stoppable

    stopping = stoppable("this condition")
    stop = stopping.__enter__()
    try:
        return _evaluate(cks, conds, seeds, num_envs, task, out, sweep, robot, robot_name, robot_cfgs, twin, videos,
                         episodes, chunk, failed, record, stop)
    finally:
        stopping.__exit__(None, None, None)


def _evaluate(cks, conds, seeds, num_envs, task, out, sweep, robot, robot_name, robot_cfgs, twin, videos,
              episodes, chunk, failed, record, stop) -> Path:
    """sim2real's runs: the simulated conditions, then the robot; on a signal, the episodes so
    far go into results.json and the report, and Stopped says so."""
    from embodied.eval.report import write_report
    from embodied.eval.results_file import write_results

    def stopped() -> None:  # called between conditions: save() is defined by then
        if stop:
            if episodes:
                save()
                write_report(out)
            stop.check(f"{len(episodes)} episodes in {out / 'results.json'} and the report made from them"
                       if episodes else "nothing (no condition had finished)", command_line())

    t0 = time.monotonic()
    sim_s = robot_s = 0.0
    interventions: dict = {}

    def save() -> None:
        protocol = protocol_of(cks, task, seeds, sweep, robot, chunk, num_envs)
        protocol["wall_s"] = {"simulation": round(sim_s, 1), "robot": round(robot_s, 1)}
        if robot_name is not None:  # the safety layer clips like the simulator; anything else shows here
            protocol["robot_safety_interventions"] = interventions
        write_results(out / "results.json", protocol, conds, episodes)

    for ck in cks:
        for name, cond in conds.items():
            if cond["kind"] != "robot":
                stopped()
                succ, lengths, chunk[ck.label] = run_sim(ck, cond, seeds, num_envs)
                record(ck, name, succ, lengths)
                sim_s = time.monotonic() - t0

    if robot_name is not None:
        tw = Twin(task, twin, cks[0].cfg, cks[0].label, out / "twin.log", video=videos) if twin else None
        robot_video, twin_hz = None, _control_hz(task) if twin else 0.0
        try:
            for ck in cks:
                stopped()
                rc = tw.robot_config(ck.cfg) if tw else robot_cfgs[ck.label]
                # the sim videos' rate: a twin is commanded faster than the task's control rate
                fps = twin_hz if tw else rc.control_hz
                want = (out / "videos" / _safe(robot_name), fps) if videos and robot_video is None else None
                succ, lengths, info = run_robot(ck.policy, rc, seeds, tw, video=want)
                robot_video = robot_video or info["video"]
                robot_s += info["wall_s"]
                interventions[ck.label] = info["safety_interventions"]
                record(ck, robot_name, succ, lengths)
        except Sim2RealError as e:  # keep what ran: the simulated episodes and finished robot runs
            save()
            write_report(out)
            raise Sim2RealError(f"{e} (the episodes that finished are in {out / 'results.json'})") from None
        finally:
            if tw is not None:
                tw.close()
    stopped()
    save()
    for name, (ck, seed) in failed.items() if videos else []:
        if conds[name]["kind"] != "robot":  # robot videos were recorded while the robot ran
            first_failure_video(ck, conds[name], seed, out / "videos" / f"{_safe(name)}_seed{seed}.mp4")
    return write_report(out)


def _control_hz(task: str) -> float:
    from sims.registry import make_env

    env = make_env(task, 1, num_threads=1)
    try:
        return float(env.spec.control_hz)
    finally:
        env.close()


def _safe(condition: str) -> str:
    """A condition's name as a file name: twin:twin_gap -> twin_twin_gap, mass=2 -> mass_2."""
    return condition.replace("=", "_").replace(":", "_").replace("/", "_")


def cmd_sim2real(args) -> int:
    from embodied.eval.report import paired_lines, tally, verdict
    from embodied.eval.results_file import load_results
    from embodied.run.stop import no_empty_dirs

    with no_empty_dirs(args.out):
        path = sim2real(args.checkpoints, args.task, args.out, trials=args.trials, sweep_file=args.sweep,
                        twin=args.twin, robot_file=args.robot, num_envs=args.num_envs, videos=not args.no_videos,
                        device=args.device)
    results = load_results(Path(args.out) / "results.json") if (Path(args.out) / "results.json").is_file() else None
    for line in verdict(tally(results), results.conditions) if results else []:
        print(f"verdict: {line}")
    for line in paired_lines(results) if results else []:
        print(f"paired: {line}")
    html = path.with_name("report.html")
    print(f"wrote {path}" + (f" and {html} (open it in a browser)" if html.is_file() else ""))
    return 0
