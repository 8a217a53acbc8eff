"""LIBERO task names: "libero:SUITE/TASK" (one task; TASK is its index or its name) or
"libero:SUITE" (every task of the suite, env i running task i mod n_tasks), optionally ending in
"@sampled" (layouts drawn by LIBERO's placement samplers instead of the official init states).
Imports no LIBERO."""

from __future__ import annotations



def _error(message: str) -> Exception:
    """The contract's EnvError, imported here so that the names above load without torch
    (`embodied list`)."""
    from sims.vecenv import EnvError

    return EnvError(message)

# suite -> (number of tasks, max steps of the published evaluation scripts, after 10 settle steps)
SUITES: dict[str, tuple[int, int]] = {
    "libero_spatial": (10, 220),
    "libero_object": (10, 280),
    "libero_goal": (10, 300),
    "libero_10": (10, 520),
    "libero_90": (90, 400),
}
SETTLE_STEPS = 10  # no-op steps (gripper open) after every reset, as in the eval scripts
NUM_INIT_STATES = 50  # official evaluation init states per task
STATE_DIM, OBJ_DIM = 8, 6  # "state" (eef pos, axis-angle, fingers); the goal's two objects' xyz
SIM_START = STATE_DIM + OBJ_DIM  # where the flat MuJoCo state (time first) starts in "privileged"
LAYOUT_SUFFIXES = ("official", "sampled")  # "libero:SUITE[/TASK]@LAYOUTS"


def suite_names() -> list[str]:
    """The names make_env accepts for whole suites: ["libero:libero_10", ...]."""
    return [f"libero:{s}" for s in SUITES]


def split_layouts(task: str) -> tuple[str, str | None]:
    """"libero:SUITE[/TASK]@sampled" -> ("libero:SUITE[/TASK]", "sampled"); no suffix -> (task,
    None). The suffix lets a config or `embodied collect` ask for sampled layouts by task name."""
    name, at, layouts = task.partition("@")
    if at and layouts not in LAYOUT_SUFFIXES:
        raise _error(f"task: unknown layouts {layouts!r} in {task!r}; allowed after '@': {', '.join(LAYOUT_SUFFIXES)}")
    return name, (layouts if at else None)


def parse_name(task: str) -> tuple[str, str | None]:
    """"libero:SUITE[/TASK][@LAYOUTS]" -> (suite, task or None); one-line EnvError when malformed.
    A task index is checked here; a task name is checked by the worker against LIBERO's list."""
    body = split_layouts(task)[0].removeprefix("libero:")
    suite, _, sub = body.partition("/")
    if suite not in SUITES:
        raise _error(f"task: unknown LIBERO suite {suite!r} in {task!r}; allowed: {', '.join(SUITES)}")
    if not sub:
        if "/" in body:
            raise _error(f"task: {task!r} names no task after '/'; use libero:{suite}/INDEX or libero:{suite}")
        return suite, None
    n = SUITES[suite][0]
    if sub.lstrip("-").isdigit() and not 0 <= int(sub) < n:
        raise _error(f"task: index {sub} out of range for {suite}; allowed: 0..{n - 1} or a task name")
    return suite, sub
