"""MuJoCo tasks by name. A task registers itself in its own file, as ManiSkill's `register_env`:

    @register_task("PushCube")
    class PushCube(Task): ...

Adding a task is adding that file to sims/mujoco/tasks/: `task_class` imports every module of
the package once, so no list elsewhere names it. `task_names()` reads the names from the
files' `@register_task("...")` lines without importing them (no MuJoCo, no numpy), which keeps
`embodied list` fast (tests/test_cli_startup.py checks both agree).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path
from typing import Callable

TASKS: dict[str, type] = {}
_HERE = Path(__file__).resolve().parent


def register_task(name: str) -> Callable[[type], type]:
    """Class decorator: register the task class under `name` (also its `name` attribute)."""
    def register(cls: type) -> type:
        if name in TASKS and TASKS[name].__qualname__ != cls.__qualname__:
            raise ValueError(f"task {name!r} registered twice: {TASKS[name].__module__} and {cls.__module__}")
        cls.name = name
        TASKS[name] = cls
        return cls
    return register


def _import_all() -> None:
    for mod in pkgutil.iter_modules([str(_HERE)]):
        importlib.import_module(f"{__package__}.{mod.name}")


def task_classes() -> dict[str, type]:
    """Every registered task: name -> class (imports the task modules, hence MuJoCo)."""
    _import_all()
    return dict(TASKS)


def task_class(task: str) -> type:
    """The class of `task`; EnvError (one line, naming the allowed tasks) when there is none."""
    from sims.vecenv import EnvError

    tasks = task_classes()
    if task not in tasks:
        import difflib

        lower = {t.lower(): t for t in tasks}
        close = difflib.get_close_matches(task.lower(), lower, n=1, cutoff=0.6)
        hint = f"did you mean {lower[close[0]]!r}? " if close else ""
        from sims.family import describe_families

        raise EnvError(f"task: unknown task {task!r}; {hint}allowed: the MuJoCo tasks {', '.join(sorted(tasks))}; "
                       f"other families by prefix: {describe_families()} (`embodied list`)")
    return tasks[task]


def task_names() -> list[str]:
    """The registered names, sorted, read from the `@register_task("...")` decorators of the
    package's files without importing them."""
    names = []
    for path in sorted(_HERE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                names += [d.args[0].value for d in node.decorator_list
                          if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "register_task"
                          and d.args and isinstance(d.args[0], ast.Constant)]
    return sorted(names)
