"""The "multi:A+B+..." family: several tasks' envs in one batch (sims/multitask.py), each made by
its own family; num_envs split evenly."""

from __future__ import annotations

from typing import Any

from sims.family import Family, family_of, register_family


def _make(task: str, num_envs: int, **kwargs: Any) -> Any:
    from sims.multitask import MultiTaskVecEnv, parse_multi
    from sims.registry import make_env
    from sims.vecenv import EnvError

    names = parse_multi(task)
    if num_envs % len(names):
        raise EnvError(f"num_envs: {num_envs} envs cannot be split evenly over the {len(names)} tasks of "
                       f"{task}; allowed: a multiple of {len(names)}")
    envs = []
    try:
        for name in names:
            envs.append(make_env(name, num_envs // len(names), **kwargs))
        return MultiTaskVecEnv(task, envs)
    except BaseException:
        for e in envs:
            e.close()
        raise


def _expert(task: str) -> Any:
    from sims.multitask import MultiExpert, parse_multi
    from sims.registry import expert_for

    return MultiExpert([expert_for(t) for t in parse_multi(task)])


def _cycle(task: str) -> int:
    """Its rows split into n equal blocks, one per task (a batch is a multiple of n)."""
    from sims.multitask import parse_multi

    return len(parse_multi(task))


def _knobs(task: str = "") -> tuple[str, ...]:
    """The knobs every one of its tasks takes."""
    from sims.multitask import parse_multi

    if not task:
        return ()
    sets = [set(family_of(t).knobs(t)) for t in parse_multi(task)]
    first = family_of(parse_multi(task)[0]).knobs(parse_multi(task)[0])
    return tuple(k for k in first if all(k in s for s in sets))


register_family(Family(
    name="multi", prefix="multi:", make=_make, pattern="multi:<A>+<B>", title="multi-task envs",
    doc="docs/tasks.md", expert=_expert, knobs=_knobs, task_cycle=_cycle, backends=("cpu", "warp")))
