"""MetaWorld's family: "metaworld:MT10", "metaworld:MT50", "metaworld:MT10/<task>",
"metaworld:<task>", each with an optional "@goal", in the side venv .venv-metaworld
(`make metaworld`, docs/metaworld.md)."""

from __future__ import annotations

from pathlib import Path

from sims.family import Family, SuiteProtocol, lazy, register_family
from sims.metaworld.tasks import CAMERAS, parse_name, suite_names, tasks_of


def _names() -> list[str]:
    return suite_names() + ["metaworld:MT10/<task>", "metaworld:<task> (50 v3 tasks); each with @goal"]


def _cycle(task: str) -> int:
    """Env i of a benchmark runs task i mod n (MT10: 10, MT50: 50)."""
    return len(parse_name(task)[1])


def _python() -> Path:
    from sims.metaworld.proc import metaworld_python

    return metaworld_python()


# The VLA papers' multi-task protocol: every task of a benchmark, one episode per fixed seed
# (seed k draws layout k), MetaWorld's max path length, the mean over tasks.
PROTOCOL = SuiteProtocol(
    name="MetaWorld", tasks_of=tasks_of, max_seeds=1000, seeds_limit="MetaWorld's protocol runs up to 1000 seeds per task", seeds_key="episodes",
    benchmark=lambda task, n, n_tasks: (f"MetaWorld {task.removeprefix('metaworld:')}: {n_tasks} task(s), "
                                        f"seeds 0..{n - 1} per task (seed k = layout k)"),
    success=("MetaWorld's info['success'] (the task's own success check) holds at some control step; the episode "
             "ends there (terminated) or after the max path length (a failure)"),
    packages=("metaworld", "mujoco", "gymnasium"), python=_python, max_envs=10)

register_family(Family(
    name="metaworld", prefix="metaworld:", make=lazy("sims.metaworld.env:MetaWorldVecEnv", drop_none=True), pattern="metaworld:<MT10|MT50|task>",
    title="MetaWorld tasks", setup="make metaworld", doc="docs/metaworld.md", expert=lazy("sims.metaworld.expert:expert_for"), names=_names, cameras=CAMERAS,
    default_cameras=CAMERAS[:1], protocol=PROTOCOL, task_cycle=_cycle))
