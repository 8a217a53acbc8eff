"""Simulator families: the table sims/registry.py reads, filled by the families themselves.

A family is every task name under one prefix ("libero:", "metaworld:", "ms:", "gym:", "multi:",
"wm:"; the MuJoCo tasks are the family of names without a prefix). Each declares itself in its
own package, in `sims/<package>/family.py`, as a task does with `@register_task`:

    register_family(Family(name="libero", prefix="libero:", make=_make, ...))

`families()` imports every `sims/*/family.py` once, so no list elsewhere names a family. A family
module imports nothing heavy at its top (no torch, no simulator): `embodied list` reads the table.
Its callables import their simulator when they run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

_HERE = Path(__file__).resolve().parent
FAMILIES: dict[str, "Family"] = {}  # prefix -> family ("" for the MuJoCo tasks)


def _no_names() -> list[str]:
    return []


def _one_task(task: str) -> int:
    return 1


def _no_knobs(task: str = "") -> tuple[str, ...]:
    return ()


def _no_versions() -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class OwnKwarg:
    """A make_env keyword only this family reads (a world model's `rollout`): another family
    refuses it unless it is at its default."""

    key: str
    what: str  # "steps a world model's ensemble"
    default: Any
    shown: str  # the default as a config writes it


@dataclass(frozen=True)
class SuiteProtocol:
    """A benchmark's published evaluation protocol, as data: every task of a suite, one episode
    per fixed seed 0..N-1, deterministic actions, the mean over tasks. embodied/eval/suite_protocol.py
    runs it (`embodied sim2real --task`) and writes the report folder.

    tasks_of(task) -> the tasks one name stands for ("libero:libero_spatial" -> its 10 tasks).
    max_seeds / seeds_limit: the largest N and why ("LIBERO has 50 official init states per task").
    seeds_key: the name of N in the report's config hash ("inits", "episodes").
    benchmark(task, n, n_tasks) -> the report's benchmark line; success: what counts as success.
    lines: more lines for the report's protocol block ({"settle_steps": "..."}).
    packages / python(): the simulator packages whose versions the report names, read with that
      interpreter (a side venv's); max_envs: the largest batch `sim2real` makes (None: any).
    clock_column: a privileged column that goes back at a new episode (LIBERO's sim time): the
      scripted expert is reset there; None for a memoryless expert.
    """

    name: str
    tasks_of: Callable[[str], list[str]]
    max_seeds: int
    seeds_limit: str
    seeds_key: str
    benchmark: Callable[[str, int, int], str]
    success: str
    packages: tuple[str, ...]
    python: Callable[[], Path]
    lines: dict[str, str] = field(default_factory=dict)
    max_envs: int | None = None
    clock_column: int | None = None


@dataclass(frozen=True)
class Family:
    """One simulator family (module doc). Every callable imports its simulator when it runs.

    make(task, num_envs, **kwargs) -> VecEnv: kwargs are make_env's, the generic ones already
      checked (backend, randomisation knobs, other families' own keywords).
    expert(task) -> expert: privileged obs float [B, P] -> actions float32 [B, A]; None: no expert.
    names() -> the names `embodied list` shows; pattern: how a name looks, for messages and list.
    cameras / default_cameras: the camera names `collect --cameras` allows, and its default.
    knobs(task) -> the randomisation knobs a sweep may name; () refuses env.randomization/reality.
    protocol: its SuiteProtocol, which `embodied sim2real --task` runs instead of the randomisation
      conditions (embodied/eval/suite_protocol.py); None for none.
    task_cycle(task) -> how many tasks hold fixed rows of a batch (sims/registry.py task_cycle).
    backends: the env.backend values it takes; "warp" families receive `backend` in kwargs.
    twin: `embodied sim2real --twin` runs its tasks (the MuJoCo twin node).
    versions() -> {package: version} of its simulator, for a report's protocol block.
    device_kwargs(device) -> extra make_env kwargs when the env is built for a torch device.
    sim_task(task) -> the simulator task behind one of its names (a world model's: the task it
      learned; EnvSpec.sim_task says the same of a built env); None: the name itself.
    """

    name: str
    prefix: str
    make: Callable[..., Any]
    pattern: str
    title: str  # "LIBERO tasks": the family in one-line messages
    doc: str = ""  # its reference page, docs/<page>.md
    setup: str = ""  # what installs it, when .venv lacks it: "make libero", "the maniskill extra"
    expert: Callable[[str], Any] | None = None
    names: Callable[[], list[str]] = _no_names
    cameras: tuple[str, ...] = ("front", "wrist")
    default_cameras: tuple[str, ...] = ("front",)
    knobs: Callable[..., tuple[str, ...]] = _no_knobs
    protocol: SuiteProtocol | None = None
    task_cycle: Callable[[str], int] = _one_task
    backends: tuple[str, ...] = ("cpu",)
    twin: bool = False
    versions: Callable[[], dict[str, str]] = _no_versions
    device_kwargs: Callable[[Any], dict] | None = None
    sim_task: Callable[[str], str] | None = None
    own_kwargs: tuple[OwnKwarg, ...] = field(default=())


def lazy(target: str, drop_none: bool = False) -> Callable[..., Any]:
    """A callable that imports "module:attribute" when it is called (not when a family module
    is imported) and calls it; drop_none: without the keywords whose value is None (make_env
    passes every setting, a family's env takes what it has, at its own defaults)."""
    module, _, attr = target.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        fn = getattr(importlib.import_module(module), attr)
        return fn(*args, **({k: v for k, v in kwargs.items() if v is not None} if drop_none else kwargs))

    call.__doc__ = f"{target}, imported when called"
    return call


def register_family(family: Family) -> Family:
    """Add `family` to the table; a second family under the same prefix is an error."""
    old = FAMILIES.get(family.prefix)
    if old is not None and old.name != family.name:
        raise ValueError(f"family prefix {family.prefix!r} registered twice: {old.name} and {family.name}")
    FAMILIES[family.prefix] = family
    return family


def _import_all() -> None:
    for path in sorted(_HERE.glob("*/family.py")):
        importlib.import_module(f"sims.{path.parent.name}.family")


def families() -> list[Family]:
    """Every registered family, the MuJoCo tasks' (prefix "") first, then by prefix."""
    _import_all()
    return [FAMILIES[p] for p in sorted(FAMILIES)]


def family_of(task: str) -> Family:
    """The family whose prefix `task` starts with (the longest); the MuJoCo tasks' for a name
    without a registered prefix (make_env then names every family when the task is unknown)."""
    _import_all()
    best = ""
    for prefix in FAMILIES:
        if prefix and task.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return FAMILIES[best]


def describe_families() -> str:
    """"ms:<ManiSkill env id>, libero:<suite>[/<task>], ...": every prefixed family's pattern."""
    return ", ".join(f.pattern for f in families() if f.prefix)
