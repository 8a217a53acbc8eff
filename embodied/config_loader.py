"""The one config loader: a YAML file (or a name in configs/) plus dotted key=value overrides,
into a mapping, then into typed dataclasses. Every command reads its config through here:
`embodied train` (embodied/config.py), `embodied sft`, `embodied pipeline`,
`embodied finetune-robot` (embodied/robot_rl/config.py) and `embodied world-model train`.

    find_config("ppo_reach")                     # configs/ppo/ppo_reach.yaml, or the path itself
    raw = load_mapping(path, ["ppo.lr=1e-3"])    # the YAML's mapping with the overrides set
    cfg = from_dict(ExperimentConfig, raw)       # typed and checked, key by key

An override's value is parsed as YAML ("1e-3" a float, "[1, 2]" a list, "null" None, "" None);
its dotted key walks into nested sections, creating the missing ones. Every bad input is a
`ConfigError` with one line naming the file or key and what is allowed; nothing is rewritten
after loading. This module imports only PyYAML (tests/test_cli_startup.py).
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


class ConfigError(ValueError):
    """A bad config file, key or value; the message is one line."""


def find_config(name: str | Path) -> Path:
    """A config path; or a name under configs/ (with or without .yaml): "ppo/ppo_reach", or
    just "ppo_reach" when one kind folder holds it. A name that matches nothing comes back as
    given (the loader reports it missing); one that two folders hold is a ConfigError."""
    path = Path(name)
    if path.is_file():
        return path
    for cand in (CONFIG_DIR / name, CONFIG_DIR / f"{name}.yaml"):
        if cand.is_file():
            return cand
    if len(path.parts) == 1:
        found = sorted({p for n in (path.name, f"{path.name}.yaml") for p in CONFIG_DIR.glob(f"*/{n}") if p.is_file()})
        if len(found) > 1:
            raise ConfigError(f"config {name!r}: {' and '.join(str(p.relative_to(CONFIG_DIR)) for p in found)} "
                              f"both match; give the folder, e.g. {found[0].parent.name}/{path.name}")
        if found:
            return found[0]
    return path


def config_names() -> list[str]:
    """Every config under configs/ as its folder and name ("ppo/ppo_reach"), sorted."""
    return sorted(str(p.relative_to(CONFIG_DIR).with_suffix("")) for p in CONFIG_DIR.rglob("*.yaml"))


def read_yaml(path: str | Path, what: str = "sections") -> dict[str, Any]:
    """The top-level mapping of a YAML file (empty file: {}); `what` names its keys in the error."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of {what}")
    return raw


def apply_overrides(raw: dict[str, Any], overrides: typing.Iterable[str], example: str = "ppo.lr=1e-3") -> dict[str, Any]:
    """A deep copy of `raw` with every "a.b.c=value" set (value parsed as YAML)."""
    import yaml

    raw = copy.deepcopy(raw)
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. {example}")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"override '{key}': {value!r} is not a YAML value") from None
        set_dotted(raw, key, parsed)
    return raw


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    """raw[a][b][c] = value for key "a.b.c", creating missing sections."""
    parts = key.split(".")
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override '{key}': '{part}' is not a section")
    node[parts[-1]] = value


def load_mapping(path: str | Path | None, overrides: typing.Iterable[str] = (), what: str = "sections",
                 example: str = "ppo.lr=1e-3") -> dict[str, Any]:
    """read_yaml(path) (or {} when path is None) with the overrides applied."""
    return apply_overrides(read_yaml(path, what) if path is not None else {}, overrides, example)


def from_dict(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass `cls` from a mapping, checking every key and value type. A class with
    `variants()` (name -> class) and `variant_key` is a family of sections: the value of that
    key (else the class's default) picks the class, whose keys alone are allowed
    (policies/configs.py: the policy section by policy.name)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    whose = ""
    if callable(getattr(cls, "variants", None)):
        cls, whose = variant(cls, data, prefix)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(f"unknown config key '{prefix}{key}'{whose}; allowed: {', '.join(names)}")
        kwargs[key] = coerce(hints[key], value, f"{prefix}{key}")
    return cls(**kwargs)


def variant(cls: type, data: dict[str, Any], prefix: str) -> tuple[type, str]:
    """(the class data's variant key picks among cls.variants(), " for KEY=VALUE" for messages)."""
    key, table = cls.variant_key, cls.variants()
    default = next(f.default for f in dataclasses.fields(cls) if f.name == key)
    choice = data.get(key, default)
    if not isinstance(choice, str) or choice not in table:
        raise ConfigError(f"{prefix}{key}: {choice!r} is not allowed; choose one of {', '.join(table)}")
    return table[choice], f" for {prefix}{key}={choice}"


def coerce(tp: Any, value: Any, key: str) -> Any:
    """Check `value` against type `tp`; return it (ints widen to floats)."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key + ".")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not allowed; choose one of {', '.join(map(str, allowed))}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        for tp_i in inner[:-1]:  # str | dict: the first type that fits
            try:
                return coerce(tp_i, value, key)
            except ConfigError:
                pass
        try:
            return coerce(inner[-1], value, key)
        except ConfigError:
            if len(inner) == 1:
                raise
        names = " or ".join("mapping" if typing.get_origin(a) is dict else getattr(a, "__name__", str(a))
                            for a in inner)
        raise ConfigError(f"{key}: expected {names}, got {value!r}")
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return value
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            return float(value)
        except ValueError:
            pass
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (str, bool) and isinstance(value, tp):
        return value
    raise ConfigError(f"{key}: expected {getattr(tp, '__name__', tp)}, got {value!r}")
