"""How a gymnasium env's observation, action, reward and success map onto our contract.

A mapping is a dict (make_env(..., mapping={...}), or a YAML file named by the task,
"gym:path/to/map.yaml"); every field but env_id has a default, and PRESETS holds the ones for
gymnasium's MuJoCo arms. Fields:

  env_id       the gymnasium id ("Reacher-v5"); make_kwargs: more keywords for gymnasium.make
  state        the observation columns a real robot would know, as indices into the flattened
               observation (a Box) or as keys of a Dict observation; default: all of it
  privileged   the columns after the state in "privileged" (which starts with the state);
               default: every column not in the state
  cameras      {our camera name: "render"} (the env's render(), rgb_array; the default, as
               "render") or {name: a Dict
               observation key holding uint8 [H, W, 3]}
  success      {"key": info key, "min": threshold}: success when info[key] >= min; without
               "min", bool(info[key]); absent: never (the metric is 0, episodes end as the env says)
  reward_scale the env's reward times this
  instruction  the language instruction of every episode (default: the env id)
  vector       "single" (B copies of gymnasium.make in a SyncVectorEnv), "sync" or "async"
               (gymnasium.make_vec's vectorisation)
  autoreset    the gymnasium vector env's mode: "next_step" (gymnasium's default), "same_step" or
               "disabled"; each is translated to our same-step auto-reset (sims/gym/env.py)
  python       a side venv's interpreter (a path, or relative to the checkout): the env runs in
               worker processes there (sims/gym/side.py); "" runs it in this process
Imports neither gymnasium nor torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

PRESETS: dict[str, dict] = {
    # obs [10]: cos q1, cos q2, sin q1, sin q2, target xy, qvel [2], fingertip - target xy
    "Reacher-v5": {"state": [0, 1, 2, 3, 6, 7], "instruction": "touch the target with the fingertip",
                   "success": {"key": "reward_dist", "min": -0.02}},
    # obs [23]: qpos [7], qvel [7], fingertip xyz, object xyz, goal xyz
    "Pusher-v5": {"state": list(range(17)), "instruction": "push the object to the goal",
                  "success": {"key": "reward_dist", "min": -0.05}},
}
VECTOR = ("single", "sync", "async")
AUTORESET = ("next_step", "same_step", "disabled")


def _error(message: str) -> Exception:
    from sims.vecenv import EnvError

    return EnvError(message)


@dataclass(frozen=True)
class GymMapping:
    env_id: str
    make_kwargs: dict = field(default_factory=dict)
    state: list | None = None
    privileged: list | None = None
    cameras: dict = field(default_factory=lambda: {"render": "render"})
    success: dict | None = None
    reward_scale: float = 1.0
    instruction: str = ""
    vector: str = "single"
    autoreset: str = "next_step"
    python: str = ""


def load_mapping(task: str, mapping: dict | None = None) -> GymMapping:
    """"gym:<env id>" (its preset, if any, updated by `mapping`) or "gym:<file>.yaml" -> a
    checked GymMapping; one-line EnvError naming a bad field."""
    body = task.removeprefix("gym:")
    if body.endswith((".yaml", ".yml")):
        import yaml

        path = Path(body)
        if not path.is_file():
            raise _error(f"task: no mapping file {body!r}; allowed: gym:<env id> or gym:<file>.yaml (docs/gym.md)")
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict) or "env_id" not in data:
            raise _error(f"task: {body}: a mapping file holds a mapping with env_id (docs/gym.md)")
    else:
        if not body:
            raise _error("task: 'gym:' names no env; allowed: gym:<gymnasium env id> or gym:<file>.yaml")
        data = {"env_id": body, **PRESETS.get(body, {})}
    data = {**data, **(mapping or {})}
    known = {f.name for f in fields(GymMapping)}
    bad = sorted(set(data) - known)
    if bad:
        raise _error(f"mapping.{bad[0]}: unknown field; allowed: {', '.join(sorted(known))}")
    m = GymMapping(**data)
    if m.vector not in VECTOR:
        raise _error(f"mapping.vector: {m.vector!r}; allowed: {', '.join(VECTOR)}")
    if m.autoreset not in AUTORESET:
        raise _error(f"mapping.autoreset: {m.autoreset!r}; allowed: {', '.join(AUTORESET)}")
    for cam, source in m.cameras.items():
        if not isinstance(source, str) or not source:
            raise _error(f"mapping.cameras.{cam}: {source!r}; allowed: 'render' or an observation key")
    if m.success is not None and (not isinstance(m.success, dict) or "key" not in m.success):
        raise _error(f"mapping.success: {m.success!r}; allowed: {{key: <info key>, min: <number>}} or null")
    return m


def columns(m: GymMapping, width: int, spans: dict[str, tuple[int, int]] | None = None) -> tuple[list[int], list[int]]:
    """(state columns, privileged columns) of a flat observation of `width` columns, the
    privileged ones starting with the state's. An entry of state / privileged is a column (int)
    or, for a Dict observation, a key whose columns spans[key] = (start, stop) hold."""
    def resolve(spec: list, what: str) -> list[int]:
        out = []
        for c in spec:
            if isinstance(c, str) and spans and c in spans:
                out += list(range(*spans[c]))
            elif isinstance(c, int) and not isinstance(c, bool) and 0 <= c < width:
                out.append(c)
            else:
                allowed = f"ints in 0..{width - 1}" + (f" or keys {', '.join(spans)}" if spans else "")
                raise _error(f"mapping.{what}: {c!r}; allowed: {allowed}")
        return out

    state = list(range(width)) if m.state is None else resolve(m.state, "state")
    rest = [c for c in range(width) if c not in state] if m.privileged is None else resolve(m.privileged, "privileged")
    return state, state + [c for c in rest if c not in state]
