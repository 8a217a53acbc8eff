"""MetaWorld's multi-task protocol of the VLA papers (sims/metaworld/family.py's PROTOCOL, run by
embodied/eval/suite_protocol.py): one episode per fixed seed 0..N-1 (seed k = layout k) of every
task of a benchmark, MetaWorld's max path length, deterministic actions; the report folder of
`embodied sim2real` plus the mean over tasks (the number the papers report).

  embodied sim2real CKPT... --task metaworld:MT10 --trials 50 --out DIR      (checkpoints)
  python -m embodied.eval.metaworld_protocol expert --task metaworld:MT10 --episodes 50 --out DIR
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from embodied.eval.suite_protocol import main as _main
from embodied.eval.suite_protocol import run_checkpoints, run_episodes, run_source, write_folder

__all__ = ["run_checkpoints", "run_episodes", "run_expert", "write_folder"]


def run_expert(task: str, out: str | Path, episodes: int = 50, num_envs: int = 10,
               log: Callable[[str], None] = print) -> Path:
    """The scripted policies through the protocol (the ceiling a learned policy is read against)."""
    return run_source("expert", task, out, episodes, num_envs, log=log)


def main(argv: list[str] | None = None) -> None:
    _main(argv, seeds_option="--episodes")


if __name__ == "__main__":
    main()
