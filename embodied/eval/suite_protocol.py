"""Running a benchmark suite's protocol (LIBERO, MetaWorld): every source on every task, one episode
per fixed seed, written as a sim-to-real report folder; stoppable between tasks.

The suites differ in their task names, seed ranges and the protocol block of results.json
(embodied/eval/libero_protocol.py, embodied/eval/metaworld_protocol.py); the loop, the mean over
tasks and the stop between tasks are these.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any, Callable

RUN_SIZE = 10  # consecutive seeds per `run`, the unit of the IQM's stratified bootstrap

# (label, policy, make, task, seeds per task, num_envs, log, after_task) -> (episodes, info)
RunEpisodes = Callable[..., tuple[list[dict], dict]]
# (out, task, seeds per task, episodes, info, sources, num_envs, wall_s) -> report.md
WriteFolder = Callable[..., Path]


def protocol_env(env_cfg: Any, task: str) -> Any:
    """A checkpoint's env config (its observations, cameras, image size) on one task of the
    protocol, with the task's own time limit (MetaWorld's 500 steps, a LIBERO suite's): a training
    run's shorter cap (env.max_episode_steps, 150 in the MT10 recipes) does not carry over."""
    return dataclasses.replace(env_cfg, task=task, num_threads=1, max_episode_steps=None)


def run_on_tasks(label: str, policy: Any, make: Callable[[str, int], Any], tasks: list[str], prefix: str,
                 seeds: int, num_envs: int, log: Callable[[str], None],
                 after_task: Callable[[list[dict], dict], None] | None = None) -> tuple[list[dict], dict]:
    """One episode per seed 0..seeds-1 of each task (make(task, B) builds its env), deterministic
    actions. Returns (episodes in results.json's form, {"control_hz", "max_episode_steps",
    "chunk_size"}); after_task(episodes so far, info) runs after each task."""
    from embodied.eval.evaluate import evaluate

    episodes, info = [], {}
    for t in tasks:
        env = make(t, min(num_envs, seeds))
        try:
            res = evaluate(policy, env, list(range(seeds)))
            obs, _ = env.reset(seed=list(range(env.num_envs)))
            info = {"control_hz": env.spec.control_hz, "max_episode_steps": env.spec.max_episode_steps,
                    "chunk_size": int(policy.act(obs, deterministic=True).actions.shape[1])}
        finally:
            env.close()
        name = t.removeprefix(prefix)
        episodes += [{"checkpoint": label, "condition": "nominal", "task": name, "seed": k, "success": bool(s),
                      "length": int(n), "run": k // RUN_SIZE}
                     for k, (s, n) in enumerate(zip(res.successes, res.lengths))]
        log(f"  {label:32s} {name:32s} success {sum(res.successes)}/{seeds}")
        if after_task:
            after_task(episodes, info)
    return episodes, info


def mean_over_tasks(episodes: list[dict]) -> dict[str, str]:
    """label -> "mean [Wilson 95% of the pooled episodes] (k/n, T tasks)": every task has the same
    number of episodes, so the pooled rate is the mean of the per-task rates."""
    from embodied.eval.stats import wilson_interval

    out = {}
    for label in dict.fromkeys(e["checkpoint"] for e in episodes):
        eps = [e for e in episodes if e["checkpoint"] == label]
        k, n = sum(e["success"] for e in eps), len(eps)
        low, high = wilson_interval(k, n)
        out[label] = f"{k / n:.3f} [{low:.3f}, {high:.3f}] ({k}/{n}, {len({e['task'] for e in eps})} tasks)"
    return out


def run_and_write(runs: list[tuple[str, str, Any, Callable[[str, int], Any]]], task: str, out: str | Path,
                  seeds: int, num_envs: int, log: Callable[[str], None], run_episodes: RunEpisodes,
                  write_folder: WriteFolder) -> Path:
    """Each run (label, source, policy, make) on every task of `task` (run_episodes), then the
    report folder (write_folder). On SIGINT or SIGTERM the protocol stops after the current task
    and the folder holds the tasks done so far; Stopped says where."""
    from embodied.run.stop import command_line, stoppable

    done_before, t0 = [], time.monotonic()
    sources = {label: source for label, source, _, _ in runs}

    def write(episodes: list[dict], info: dict) -> Path:
        return write_folder(out, task, seeds, episodes, info, sources, num_envs, time.monotonic() - t0)

    info: dict = {}
    with stoppable("this task") as flag:
        for label, _, policy, make in runs:
            def kept(episodes: list[dict], inf: dict) -> None:  # after each task: stop here on a signal
                if flag:
                    folder = write(done_before + episodes, inf).parent
                    flag.check(f"{len(done_before) + len(episodes)} episodes of the tasks done so far in "
                               f"{folder / 'results.json'} and its report (this command runs every task again)",
                               command_line())

            episodes, info = run_episodes(label, policy, make, task, seeds, num_envs, log, after_task=kept)
            done_before += episodes
    return write(done_before, info)


def print_report_or_stop(run: Callable[[], Path]) -> None:
    """A protocol module's main: run(), then print the report's path; on a signal, the line of
    what was kept, and exit 128 + the signal."""
    from embodied.run.stop import Stopped

    try:
        path = run()
    except Stopped as e:
        print(e.line(), file=sys.stderr)
        sys.exit(e.exit_code)
    print(f"wrote {path}")
