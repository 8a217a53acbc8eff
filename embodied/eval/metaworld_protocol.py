"""MetaWorld's multi-task evaluation protocol of the VLA papers, written as a sim-to-real report folder.

For every task of a benchmark (`metaworld:MT10`, `metaworld:MT50`) or for one task: one episode
per fixed seed 0..N-1 (seed k draws the task's layout k: object and goal positions), MetaWorld's
max path length (500 steps), deterministic actions, success = MetaWorld's info["success"] at some
step; the per-task success rates are averaged over the tasks (the number the papers report, e.g.
pi_RL on MT50). Each task runs in its own batch of envs with the benchmark's observation layout
("metaworld:MT10/push-v3": the privileged one-hot over MT10), so a multi-task policy sees what it
was trained on. The folder is the one `embodied sim2real` writes (embodied/eval/report.py):
results.json with every episode (condition "nominal", task "MT10/push-v3", run = a block of 10
consecutive seeds), report.md / report.html with the success per task and its Wilson 95% interval
and the IQM over runs x tasks; the protocol block adds the mean over tasks with the Wilson
interval of the pooled episodes. SIGINT or SIGTERM stops it after the current task, with the
folder written from the tasks done so far.

  embodied sim2real CKPT... --task metaworld:MT10 --trials 50 --out DIR      (checkpoints)
  python -m embodied.eval.metaworld_protocol expert --task metaworld:MT10 --episodes 50 --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import torch

from embodied.eval.suite_protocol import (RUN_SIZE, mean_over_tasks, print_report_or_stop, protocol_env, run_and_write,
                                          run_on_tasks)
from sims.metaworld.tasks import MAX_PATH_LENGTH, tasks_of
from sims.vecenv import EnvError

MAX_EPISODES = 1000
SUCCESS = ("MetaWorld's info['success'] (the task's own success check) holds at some control step; the episode "
           "ends there (terminated) or after the max path length (a failure)")


class ExpertPolicy:
    """MetaWorld's scripted policies (sims/metaworld/expert.py) as a policy: act(obs) -> actions
    [B, 1, 4]. They are functions of the current observation: nothing to clear between episodes."""

    def __init__(self, task: str):
        from sims.metaworld.expert import expert_for

        self.expert = expert_for(task)

    def eval(self) -> "ExpertPolicy":
        return self

    def act(self, obs: dict, deterministic: bool = True) -> SimpleNamespace:
        return SimpleNamespace(actions=torch.from_numpy(self.expert(obs["privileged"].cpu().numpy()))[:, None])

    def close(self) -> None:
        self.expert.close()


def run_episodes(label: str, policy: Any, make: Callable[[str, int], Any], task: str, episodes: int,
                 num_envs: int, log: Callable[[str], None] = print,
                 after_task: Callable[[list[dict], dict], None] | None = None) -> tuple[list[dict], dict]:
    """One episode per seed 0..episodes-1 of each task of `task`; make(task, B) builds the env
    (run_on_tasks of embodied/eval/suite_protocol.py)."""
    if not 1 <= episodes <= MAX_EPISODES:
        raise EnvError(f"episodes: {episodes}; allowed: 1..{MAX_EPISODES} seeds per task")
    if num_envs < 1:
        raise EnvError(f"num_envs: expected >= 1, got {num_envs}")
    return run_on_tasks(label, policy, make, tasks_of(task), "metaworld:", episodes, num_envs, log, after_task)


def side_versions() -> dict[str, str]:
    """Versions of the simulator packages in .venv-metaworld (where the episodes ran)."""
    import subprocess

    from sims.metaworld.proc import metaworld_python

    code = ("import json; from importlib.metadata import version as v; print(json.dumps({n: v(n) for n in "
            "('metaworld', 'mujoco', 'gymnasium')}))")
    try:
        return json.loads(subprocess.run([str(metaworld_python()), "-c", code], capture_output=True, text=True,
                                         timeout=60, check=True).stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"metaworld": "unknown"}


def write_folder(out: str | Path, task: str, episodes_per_task: int, episodes: list[dict], info: dict,
                 sources: dict, num_envs: int, wall_s: float) -> Path:
    """results.json + report.md / report.html in `out` (embodied/eval/report.py); returns report.md."""
    from embodied.eval.report import write_report
    from embodied.eval.results_file import write_results
    from embodied.eval.candidates import versions

    toolkit, _ = versions()
    config = {"task": task, "episodes": episodes_per_task, "sources": sources}
    protocol = {
        "benchmark": f"MetaWorld {task.removeprefix('metaworld:')}: {len(tasks_of(task))} task(s), "
                     f"seeds 0..{episodes_per_task - 1} per task (seed k = layout k)",
        "seeds": list(range(episodes_per_task)),
        "trials_per_condition": episodes_per_task,
        "max_episode_steps": info.get("max_episode_steps", MAX_PATH_LENGTH),
        "chunk_size": info.get("chunk_size"),
        "executed_steps": "every action of each chunk (an episode may end inside a chunk)",
        "control_hz": info.get("control_hz"),
        "success": SUCCESS,
        "actions": "deterministic (the policy's mean / argmax)",
        "run": f"a block of {RUN_SIZE} consecutive seeds (the `run` field; the unit of the IQM interval)",
        "mean_over_tasks": mean_over_tasks(episodes),
        "sources": sources,
        "sim_envs_per_batch": num_envs,
        "wall_s": {"simulation": round(wall_s, 1)},
        "toolkit_version": toolkit,
        "simulator_versions": {**side_versions(), "torch": torch.__version__},
        "config_hash": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16],
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / "results.json", protocol, {"nominal": {"kind": "nominal"}}, episodes)
    return write_report(out)


def run_checkpoints(checkpoints: list[str], task: str, out: str | Path, episodes: int = 50, num_envs: int = 10,
                    log: Callable[[str], None] = print) -> Path:
    """`embodied sim2real CKPT... --task metaworld:...`: each checkpoint in its own observation
    setup (state, privileged or cameras), on every task of `task`."""
    from embodied.eval.candidates import load_checkpoints
    from embodied.rl.loop_parts import build_env

    tasks_of(task)  # the name is checked before any checkpoint loads
    cks = load_checkpoints(checkpoints, task)

    def maker(ck: Any) -> Callable[[str, int], Any]:
        return lambda t, b: build_env(protocol_env(ck.cfg.env, t), b)

    return run_and_write([(ck.label, str(ck.path), ck.policy, maker(ck)) for ck in cks], task, out, episodes,
                         num_envs, log, run_episodes, write_folder)


def run_expert(task: str, out: str | Path, episodes: int = 50, num_envs: int = 10,
               log: Callable[[str], None] = print) -> Path:
    """The scripted policies through the protocol (the ceiling a learned policy is read against)."""
    from sims.registry import make_env

    policy = ExpertPolicy(task)
    try:
        return run_and_write([("scripted_expert", "expert", policy, make_env)], task, out, episodes, num_envs, log,
                             run_episodes, write_folder)
    finally:
        policy.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="MetaWorld's multi-task protocol -> a sim-to-real report folder")
    p.add_argument("source", help="'expert', or a checkpoint / run directory")
    p.add_argument("--task", required=True,
                   help="metaworld:MT10, metaworld:MT50, metaworld:MT10/<task> or metaworld:<task>, "
                        "each with an optional @goal")
    p.add_argument("--episodes", type=int, default=50, help="seeds per task (0..N-1)")
    p.add_argument("--num-envs", type=int, default=10, help="envs per task batch")
    p.add_argument("--out", required=True, help="report folder")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    if a.source == "expert":
        print_report_or_stop(lambda: run_expert(a.task, a.out, a.episodes, a.num_envs))
    else:
        print_report_or_stop(lambda: run_checkpoints([a.source], a.task, a.out, a.episodes, a.num_envs))


if __name__ == "__main__":
    main()
