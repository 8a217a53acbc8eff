"""results.json of a sim-to-real evaluation: its schema, validation (one line naming the first
bad field), reading and writing. The schema is written out in embodied/eval/report.py's module
doc and docs/sim2real.md ("results.json"); the report is made from it by embodied/eval/report.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMAT, VERSION = "embodied-sim2real-results", 1
KINDS = ("nominal", "randomised", "sweep", "robot")  # sim without / with randomisation, one axis swept, robot
PROTOCOL_KEYS = ("seeds", "trials_per_condition", "chunk_size", "executed_steps", "control_hz",
                 "success", "toolkit_version", "simulator_versions", "config_hash")
EPISODE_KEYS = {"checkpoint": str, "condition": str, "task": str, "seed": int, "success": bool, "length": int}


class ReportError(ValueError):
    """A bad results.json or report folder: one line naming the field and what is allowed."""


@dataclass
class Results:
    protocol: dict
    conditions: dict[str, dict]  # name -> {"kind", "axis"?, "value"?}
    episodes: list[dict]

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "protocol": self.protocol,
                "conditions": self.conditions, "episodes": self.episodes}


def _check_condition(name: str, c) -> None:
    where = f"conditions.{name}"
    if not isinstance(c, dict) or c.get("kind") not in KINDS:
        got = c.get("kind") if isinstance(c, dict) else c
        raise ReportError(f"{where}.kind: expected one of {list(KINDS)}, got {got!r}")
    if c["kind"] == "sweep":
        if not isinstance(c.get("axis"), str) or not c["axis"]:
            raise ReportError(f"{where}.axis: expected the swept knob's name, got {c.get('axis')!r}")
        v = c.get("value")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise ReportError(f"{where}.value: expected a finite number, got {v!r}")


def _check_episode(i: int, ep, conditions: dict) -> None:
    if not isinstance(ep, dict):
        raise ReportError(f"episodes[{i}]: expected an object with keys {sorted(EPISODE_KEYS)}, got {ep!r}")
    for key, typ in EPISODE_KEYS.items():
        v = ep.get(key)
        ok = isinstance(v, typ) and (typ is bool or not isinstance(v, bool))
        if not ok or (key == "length" and v < 0):
            want = {str: "a string", int: "an integer", bool: "true or false"}[typ]
            raise ReportError(f"episodes[{i}].{key}: expected {want}{' >= 0' if key == 'length' else ''}, got {v!r}")
    if ep["condition"] not in conditions:
        raise ReportError(f"episodes[{i}].condition: expected one of {list(conditions)}, got {ep['condition']!r}")
    if "run" in ep and (isinstance(ep["run"], bool) or not isinstance(ep["run"], (int, str))):
        raise ReportError(f"episodes[{i}].run: expected an integer or a string, got {ep['run']!r}")


def validate(data) -> Results:
    """Results from the parsed JSON of results.json; ReportError names the first bad field."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ReportError(f"format: expected {FORMAT!r}, got {got!r}")
    if data.get("version") != VERSION:
        raise ReportError(f"version: expected {VERSION}, got {data.get('version')!r}")
    protocol, conditions, episodes = data.get("protocol"), data.get("conditions"), data.get("episodes")
    if not isinstance(protocol, dict):
        raise ReportError(f"protocol: expected an object, got {protocol!r}")
    if not isinstance(conditions, dict) or not conditions:
        raise ReportError(f"conditions: expected a non-empty object name -> {{kind, ...}}, got {conditions!r}")
    for name, c in conditions.items():
        _check_condition(name, c)
    for kind in ("nominal", "robot"):
        named = [n for n, c in conditions.items() if c["kind"] == kind]
        if len(named) > 1:
            raise ReportError(f"conditions: expected at most one of kind {kind!r}, got {named}")
    if not isinstance(episodes, list) or not episodes:
        raise ReportError("episodes: expected a non-empty list of episode records")
    for i, ep in enumerate(episodes):
        _check_episode(i, ep, conditions)
    with_run = sum("run" in ep for ep in episodes)
    if 0 < with_run < len(episodes):
        i = next(i for i, ep in enumerate(episodes) if "run" not in ep)
        raise ReportError(f"episodes[{i}].run: expected on every episode or on none ({with_run} of "
                          f"{len(episodes)} have it)")
    return Results(protocol, conditions, episodes)


def load_results(path: str | Path) -> Results:
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"results: expected a results.json file, {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReportError(f"results: {path} is not valid JSON ({e.msg} at line {e.lineno})") from None
    return validate(data)


def write_results(path: str | Path, protocol: dict, conditions: dict, episodes: list[dict]) -> Path:
    """Validate and write results.json (what `embodied sim2real` writes)."""
    results = validate({"format": FORMAT, "version": VERSION, "protocol": protocol,
                        "conditions": conditions, "episodes": episodes})
    path = Path(path)
    path.write_text(json.dumps(results.to_json(), indent=None, separators=(",", ":")) + "\n")
    return path
