"""LIBERO's published evaluation protocol (sims/libero/family.py's PROTOCOL, run by
embodied/eval/suite_protocol.py): one episode from each official init state 0..N-1 of every task
of a suite, 10 no-op settle steps after each reset, the suite's max steps, deterministic actions;
the report folder of `embodied sim2real` plus the mean over tasks.

  embodied sim2real CKPT... --task libero:libero_spatial --trials 50 --out DIR     (checkpoints)
  python -m embodied.eval.libero_protocol expert --task libero:libero_spatial --inits 50 --out DIR
  python -m embodied.eval.libero_protocol POLICY_DIR --task ... --image-size 224 --out DIR  (save_pretrained)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from embodied.eval import suite_protocol
from embodied.eval.suite_protocol import main as _main
from embodied.eval.suite_protocol import mean_over_tasks, run_checkpoints, run_episodes, write_folder
from sims.libero.family import tasks_of
from sims.libero.tasks import NUM_INIT_STATES

__all__ = ["mean_over_tasks", "run_checkpoints", "run_episodes", "run_source", "tasks_of", "write_folder"]


def run_source(source: str, task: str, out: str | Path, inits: int = NUM_INIT_STATES, num_envs: int = 10,
               cameras: tuple[str, ...] = ("agentview", "wrist"), image_size: int = 224,
               log: Callable[[str], None] = print) -> Path:
    """"expert", a save_pretrained policy directory or a checkpoint on init states 0..inits-1 of
    every task of `task` (suite_protocol.run_source)."""
    return suite_protocol.run_source(source, task, out, inits, num_envs, cameras, image_size, log)


def main(argv: list[str] | None = None) -> None:
    _main(argv, seeds_option="--inits")


if __name__ == "__main__":
    main()
