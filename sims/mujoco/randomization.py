"""Domain randomisation knobs: strict parsing of a config block, per-env draws, reality presets.

A randomisation is, per knob, a range [low, high] of the knob's value; each env draws its own
value uniformly in the range at every reset (integers: each value in low..high equally
likely). A reality preset is the same thing with low == high: a fixed offset from nominal.

  env.randomization: {friction: [0.5, 1.5], latency_steps: [0, 2], camera_pos: [-0.01, 0.01]}

Vector knobs (shape (3,)) take scalar bounds (the same for every component, each component
drawn independently) or one bound per component: [[lo_x, lo_y, lo_z], [hi_x, hi_y, hi_z]].
A knob left out stays at its nominal value, and costs nothing. This module imports only numpy
and yaml (config validation uses it without loading MuJoCo).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PRESET_DIR = Path(__file__).resolve().parents[2] / "configs" / "reality"
NOMINAL_FOVY = {"front": 45.0, "wrist": 75.0}  # the scene's cameras (scene.py), degrees


class RandomizationError(ValueError):
    """A bad randomisation block or preset; the message is one line naming the field."""


@dataclass(frozen=True)
class Knob:
    shape: tuple[int, ...]  # () scalar, (3,) vector
    nominal: float  # value that leaves the simulator unchanged
    low: float  # physically allowed values: low <= v <= high (open where noted)
    high: float
    integer: bool = False
    open_low: bool = False  # low itself not allowed
    open_high: bool = False
    unit: str = ""


# name -> Knob. What each does is in apply order in env.py / render.py and in docs/sim2real.md.
KNOBS: dict[str, Knob] = {
    # physics (per env, through the batch's per-simulation model fields)
    "friction": Knob((), 1.0, 0.0, 10.0, unit="scale of every geom's sliding friction"),
    "mass": Knob((), 1.0, 0.0, 100.0, open_low=True, unit="scale of the cube's mass and inertia"),
    "actuator_gain": Knob((), 1.0, 0.0, 100.0, open_low=True,
                          unit="scale of the position servos' kp (kv by its square root)"),
    # control and sensing (per env, in the env's step)
    "latency_steps": Knob((), 0.0, 0.0, 10.0, integer=True, unit="control steps of action delay"),
    "action_noise": Knob((), 0.0, 0.0, 10.0, unit="std of Gaussian noise on the action"),
    "obs_noise": Knob((), 0.0, 0.0, 10.0, unit="std of Gaussian noise on state/privileged obs"),
    # rendering (per env, in the renderer)
    "light_tilt": Knob((), 0.0, 0.0, 90.0, open_high=True, unit="degrees of the top light from vertical"),
    "light_azimuth": Knob((), 0.0, -360.0, 360.0, unit="degrees, direction of the tilt"),
    "light_intensity": Knob((), 1.0, 0.0, 10.0, unit="scale of every light's diffuse and ambient"),
    "light_warmth": Knob((), 0.0, -1.0, 1.0, unit="red x (1 + w), blue x (1 - w)"),
    "table_color": Knob((3,), 0.0, -1.0, 1.0, unit="RGB offset of the table top"),
    "object_color": Knob((3,), 0.0, -1.0, 1.0, unit="RGB offset of the cube and markers"),
    "camera_pos": Knob((3,), 0.0, -0.5, 0.5, unit="metres, camera position offset (parent frame)"),
    "camera_rot": Knob((3,), 0.0, -45.0, 45.0,
                       unit="degrees, rotation vector in the camera's own frame"),
    "camera_fovy": Knob((), 0.0, -min(NOMINAL_FOVY.values()), 180.0 - max(NOMINAL_FOVY.values()),
                        open_low=True, open_high=True,
                        unit="degrees added to each camera's fovy (front 45, wrist 75)"),
}
PHYSICS_KNOBS = ("friction", "mass", "actuator_gain")
RENDER_KNOBS = ("light_tilt", "light_azimuth", "light_intensity", "light_warmth", "table_color",
                "object_color", "camera_pos", "camera_rot", "camera_fovy")


def _allowed(k: Knob) -> str:
    lo = "(" if k.open_low else "["
    hi = ")" if k.open_high else "]"
    kind = "integers" if k.integer else "values"
    return f"{kind} in {lo}{k.low:g}, {k.high:g}{hi} ({k.unit})"


def _bound(field: str, k: Knob, value: Any) -> np.ndarray:
    """One bound (scalar, or per component for a vector knob) -> float64 array of k.shape."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise RandomizationError(f"{field}: expected a number, got {value!r}") from None
    if arr.ndim == 0 or arr.shape == k.shape:
        arr = np.broadcast_to(arr, k.shape).copy()
    else:
        want = "a number" if not k.shape else f"a number or a list of {k.shape[0]}"
        raise RandomizationError(f"{field}: expected {want}, got {value!r}")
    bad = ~np.isfinite(arr) | (arr < k.low) | (arr > k.high)
    if k.open_low:
        bad |= arr <= k.low
    if k.open_high:
        bad |= arr >= k.high
    if k.integer:
        bad |= arr != np.round(arr)
    if bad.any():
        raise RandomizationError(f"{field}: {value!r} is outside physical sense; allowed: {_allowed(k)}")
    return arr


@dataclass(frozen=True)
class Randomization:
    """Per knob, float64 bounds of the knob's shape; low == high for a fixed offset."""

    low: dict[str, np.ndarray]
    high: dict[str, np.ndarray]
    name: str = ""  # the preset's name, or "" for a config block

    @property
    def knobs(self) -> tuple[str, ...]:
        return tuple(self.low)

    def has(self, *names: str) -> bool:
        return any(n in self.low for n in names)

    def sample(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        """Draw n envs' values: name -> float64 [n, *shape] (integer knobs hold whole numbers)."""
        out = {}
        for name in KNOBS:  # fixed order: draws do not depend on the config's key order
            if name not in self.low:
                continue
            lo, hi = self.low[name], self.high[name]
            if KNOBS[name].integer:
                out[name] = rng.integers(lo.astype(np.int64), hi.astype(np.int64) + 1,
                                         size=(n, *lo.shape)).astype(np.float64)
            else:
                out[name] = lo + (hi - lo) * rng.random((n, *lo.shape))
        return out

    def nominal(self, n: int) -> dict[str, np.ndarray]:
        """The knobs' nominal values for n envs: name -> float64 [n, *shape]."""
        return {name: np.full((n, *KNOBS[name].shape), KNOBS[name].nominal) for name in self.low}


def parse(block: Any, field: str = "env.randomization") -> Randomization:
    """A config block {knob: [low, high]} -> Randomization; RandomizationError (one line) if bad."""
    if isinstance(block, Randomization):
        return block
    if not isinstance(block, dict):
        raise RandomizationError(f"{field}: expected a mapping of knob: [low, high], got {block!r:.80}")
    low, high = {}, {}
    for name, rng in block.items():
        if name not in KNOBS:
            raise RandomizationError(f"{field}: unknown key {name!r}; allowed: {', '.join(KNOBS)}")
        k, f = KNOBS[name], f"{field}.{name}"
        if not isinstance(rng, (list, tuple)) or len(rng) != 2:
            raise RandomizationError(f"{f}: expected [low, high], got {rng!r}")
        lo, hi = _bound(f, k, rng[0]), _bound(f, k, rng[1])
        if (lo > hi).any():
            raise RandomizationError(f"{f}: low {rng[0]!r} > high {rng[1]!r}; expected [low, high] "
                                     f"with low <= high")
        low[name], high[name] = lo, hi
    return Randomization(low, high)


def from_values(values: Any, field: str, name: str = "") -> Randomization:
    """Fixed values {knob: value} (a reality preset) -> Randomization with low == high."""
    if not isinstance(values, dict):
        raise RandomizationError(f"{field}: expected a mapping of knob: value, got {values!r:.80}")
    low = {}
    for key, v in values.items():
        if key not in KNOBS:
            raise RandomizationError(f"{field}: unknown key {key!r}; allowed: {', '.join(KNOBS)}")
        low[key] = _bound(f"{field}.{key}", KNOBS[key], v)
    return Randomization(low, {k: v.copy() for k, v in low.items()}, name)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_preset(name_or_path: str | Path) -> Randomization:
    """A reality preset by name (configs/reality/<name>.yaml) or by path.

    The file is a mapping with an optional `description` (str) and `values`: {knob: value}.
    """
    import yaml

    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = PRESET_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise RandomizationError(f"reality: no preset {str(name_or_path)!r}; give a file or one of: "
                                 f"{', '.join(preset_names())}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise RandomizationError(f"reality: {path.name} is not valid YAML "
                                 f"({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict) or set(raw) - {"description", "values"} or "values" not in raw:
        raise RandomizationError(f"reality: {path.name} must be a mapping with 'values' "
                                 f"(knob: value) and an optional 'description'")
    return from_values(raw["values"], f"reality.{path.stem}.values", path.stem)


def resolve(randomization: Any = None, reality: str | Path | None = None) -> Randomization | None:
    """The env's randomisation from a config block or a preset (not both); None: nominal."""
    if randomization is not None and reality is not None:
        raise RandomizationError("reality: give a reality preset or a randomization block, not both")
    if reality is not None:
        return load_preset(reality)
    if randomization is None or (isinstance(randomization, dict) and not randomization):
        return None
    return parse(randomization)
