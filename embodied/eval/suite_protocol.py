"""Running a benchmark suite's protocol (LIBERO's, MetaWorld's, any family's SuiteProtocol of
sims/family.py): every source on every task, one episode per fixed seed, written as a sim-to-real
report folder; stoppable between tasks.

A protocol is data its family declares (the task list, the seed range, the success text, the
simulator packages); the loop, the report's protocol block, the mean over tasks and the stop
between tasks are here.

  embodied sim2real CKPT... --task libero:libero_spatial --trials 50 --out DIR     (checkpoints)
  python -m embodied.eval.suite_protocol expert --task metaworld:MT10 --seeds 50 --out DIR
  python -m embodied.eval.suite_protocol POLICY_DIR --task libero:... --image-size 224 --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from sims.family import SuiteProtocol, family_of
from sims.vecenv import EnvError

RUN_SIZE = 10  # consecutive seeds per `run`, the unit of the IQM's stratified bootstrap


def protocol_of(task: str) -> SuiteProtocol:
    """The protocol of `task`'s family; one-line EnvError when it has none."""
    fam = family_of(task)
    if fam.protocol is None:
        from sims.family import families

        raise EnvError(f"task: {fam.title} have no benchmark protocol ({task}); allowed: "
                       + ", ".join(f.pattern for f in families() if f.protocol is not None))
    return fam.protocol


def protocol_env(env_cfg: Any, task: str) -> Any:
    """A checkpoint's env config (its observations, cameras, image size) on one task of the
    protocol, with the task's own time limit (MetaWorld's 500 steps, a LIBERO suite's): a training
    run's shorter cap (env.max_episode_steps, 150 in the MT10 recipes) does not carry over."""
    return dataclasses.replace(env_cfg, task=task, num_threads=1, max_episode_steps=None)


class ExpertPolicy:
    """A family's scripted expert (sims.registry.expert_for) as a policy: act(obs) -> actions
    [B, 1, A]. Where the protocol names a clock column (LIBERO's sim time), an env whose clock
    went back started a new episode and its expert's memory is cleared."""

    def __init__(self, task: str):
        from sims.registry import expert_for

        self.expert, self.clock, self.last_t = expert_for(task), protocol_of(task).clock_column, None

    def eval(self) -> "ExpertPolicy":
        return self

    def act(self, obs: dict, deterministic: bool = True) -> SimpleNamespace:
        import numpy as np
        import torch

        priv = obs["privileged"].cpu().numpy()
        if self.clock is not None:
            t = priv[:, self.clock]
            if self.last_t is not None and len(self.last_t) == len(t):
                self.expert.reset(np.flatnonzero(t <= self.last_t), priv)
            self.last_t = t
        return SimpleNamespace(actions=torch.from_numpy(np.asarray(self.expert(priv), np.float32))[:, None])

    def close(self) -> None:
        if hasattr(self.expert, "close"):
            self.expert.close()


def check_seeds(protocol: SuiteProtocol, seeds: int, num_envs: int, field: str | None = None) -> None:
    """One-line EnvError for a seed count outside 1..max_seeds or a batch below 1."""
    if not 1 <= seeds <= protocol.max_seeds:
        raise EnvError(f"{field or protocol.seeds_key}: {seeds}; {protocol.seeds_limit}, allowed: 1..{protocol.max_seeds}")
    if num_envs < 1:
        raise EnvError(f"num_envs: expected >= 1, got {num_envs}")


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


def run_episodes(label: str, policy: Any, make: Callable[[str, int], Any], task: str, seeds: int,
                 num_envs: int, log: Callable[[str], None] = print,
                 after_task: Callable[[list[dict], dict], None] | None = None) -> tuple[list[dict], dict]:
    """One episode per seed 0..seeds-1 of each task of `task` (its protocol's tasks_of)."""
    protocol = protocol_of(task)
    check_seeds(protocol, seeds, num_envs)
    return run_on_tasks(label, policy, make, protocol.tasks_of(task), family_of(task).prefix, seeds, num_envs, log,
                        after_task)


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


def side_versions(protocol: SuiteProtocol) -> dict[str, str]:
    """Versions of the protocol's simulator packages, read with its interpreter (a side venv's)."""
    code = ("import json; from importlib.metadata import version as v; print(json.dumps({n: v(n) for n in "
            f"{tuple(protocol.packages)!r}}}))")
    try:
        return json.loads(subprocess.run([str(protocol.python()), "-c", code], capture_output=True, text=True,
                                         timeout=60, check=True).stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {protocol.packages[0]: "unknown"}


def write_folder(out: str | Path, task: str, seeds: int, episodes: list[dict], info: dict, sources: dict,
                 num_envs: int, wall_s: float) -> Path:
    """results.json + report.md / report.html in `out` (embodied/eval/report.py); returns report.md."""
    import torch

    from embodied.eval.candidates import versions
    from embodied.eval.report import write_report
    from embodied.eval.results_file import write_results

    protocol = protocol_of(task)
    toolkit, _ = versions()
    config = {"task": task, protocol.seeds_key: seeds, "sources": sources}
    block = {
        "benchmark": protocol.benchmark(task, seeds, len(protocol.tasks_of(task))),
        "seeds": list(range(seeds)),
        "trials_per_condition": seeds,
        **protocol.lines,
        "max_episode_steps": info.get("max_episode_steps"),
        "chunk_size": info.get("chunk_size"),
        "executed_steps": "every action of each chunk (an episode may end inside a chunk)",
        "control_hz": info.get("control_hz"),
        "success": protocol.success,
        "actions": "deterministic (the policy's mean / argmax)",
        "run": f"a block of {RUN_SIZE} consecutive seeds (the `run` field; the unit of the IQM interval)",
        "mean_over_tasks": mean_over_tasks(episodes),
        "sources": sources,
        "sim_envs_per_batch": num_envs,
        "wall_s": {"simulation": round(wall_s, 1)},
        "toolkit_version": toolkit,
        "simulator_versions": {**side_versions(protocol), "torch": torch.__version__},
        "config_hash": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16],
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / "results.json", block, {"nominal": {"kind": "nominal"}}, episodes)
    return write_report(out)


def run_and_write(runs: list[tuple[str, str, Any, Callable[[str, int], Any]]], task: str, out: str | Path,
                  seeds: int, num_envs: int, log: Callable[[str], None]) -> Path:
    """Each run (label, source, policy, make) on every task of `task` (run_episodes), then the
    report folder (write_folder). On SIGINT or SIGTERM the protocol stops after the current task
    and the folder holds the tasks done so far; Stopped says where."""
    from embodied.run.stop import command_line, stoppable

    check_seeds(protocol_of(task), seeds, num_envs)
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


def run_checkpoints(checkpoints: list[str], task: str, out: str | Path, seeds: int, num_envs: int = 10,
                    log: Callable[[str], None] = print) -> Path:
    """`embodied sim2real CKPT... --task libero:...`: each checkpoint (trained on `task`) in its
    own observation setup (state, privileged or cameras), on every task of `task`."""
    from embodied.eval.candidates import load_checkpoints
    from embodied.run.env import build_env

    protocol = protocol_of(task)
    protocol.tasks_of(task)  # the name is checked before any checkpoint loads
    cks = load_checkpoints(checkpoints, task)

    def maker(ck: Any) -> Callable[[str, int], Any]:
        return lambda t, b: build_env(protocol_env(ck.cfg.env, t), b)

    return run_and_write([(ck.label, str(ck.path), ck.policy, maker(ck)) for ck in cks], task, out, seeds,
                         num_envs, log)


def run_source(source: str, task: str, out: str | Path, seeds: int, num_envs: int = 10,
               cameras: tuple[str, ...] | None = None, image_size: int = 224,
               log: Callable[[str], None] = print) -> Path:
    """source "expert": the family's scripted expert (privileged state); a directory with
    config.json and model.safetensors: a save_pretrained policy (e.g. a released LIBERO
    checkpoint loaded by policies.vla.pretrained), fed `cameras` (default: the family's) at
    image_size and the state, or an MLP on state or privileged, fed no images; else a checkpoint."""
    from sims.registry import make_env

    if source == "expert":
        policy, label = ExpertPolicy(task), "scripted_expert"
        try:
            return run_and_write([(label, source, policy, make_env)], task, out, seeds, num_envs, log)
        finally:
            policy.close()
    if (Path(source) / "config.json").is_file() and (Path(source) / "model.safetensors").is_file():
        from policies.base import Policy

        policy, label = Policy.from_pretrained(source), Path(source).name
        policy.eval()
        state_only = hasattr(policy.config, "obs_key")  # an MLP on state or privileged: no cameras
        cams = tuple(cameras or family_of(task).default_cameras)

        def make(t: str, b: int) -> Any:
            if state_only:
                return make_env(t, b)
            return make_env(t, b, obs_mode="rgb", cameras=cams, image_size=(image_size, image_size))

        return run_and_write([(label, source, policy, make)], task, out, seeds, num_envs, log)
    return run_checkpoints([source], task, out, seeds, num_envs, log)


def print_report_or_stop(run: Callable[[], Path]) -> None:
    """A protocol command's main: run(), then print the report's path; on a signal, the line of
    what was kept, and exit 128 + the signal."""
    from embodied.run.stop import Stopped

    try:
        path = run()
    except Stopped as e:
        print(e.line(), file=sys.stderr)
        sys.exit(e.exit_code)
    print(f"wrote {path}")


def main(argv: list[str] | None = None, seeds_option: str = "--seeds", default_seeds: int = 50) -> None:
    p = argparse.ArgumentParser(description="A benchmark suite's protocol -> a sim-to-real report folder")
    p.add_argument("source", help="'expert', a checkpoint / run directory, or a save_pretrained policy directory")
    p.add_argument("--task", required=True, help="a task name of a family with a protocol (libero:..., metaworld:...)")
    p.add_argument(seeds_option, dest="seeds", type=int, default=default_seeds, help="seeds per task (0..N-1)")
    p.add_argument("--num-envs", type=int, default=10, help="envs per task batch")
    p.add_argument("--cameras", default="", help="a policy directory's cameras (default: the family's)")
    p.add_argument("--image-size", type=int, default=224, help="a policy directory's image size")
    p.add_argument("--out", required=True, help="report folder")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    cams = tuple(c for c in a.cameras.split(",") if c) or None
    print_report_or_stop(lambda: run_source(a.source, a.task, a.out, a.seeds, a.num_envs, cams, a.image_size))


if __name__ == "__main__":
    main()
