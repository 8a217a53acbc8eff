"""Teleoperation input: an operator's standard ROS 2 message mapped to an action.

`TeleopConfig.fields` names, per action dimension, the message field it comes from:
  geometry_msgs/msg/Twist   "linear.x", "linear.y", "linear.z", "angular.x", ... (a SpaceMouse
                            or keyboard teleop node publishes these)
  sensor_msgs/msg/Joy       "axes.<i>", "buttons.<i>" (a gamepad through joy_node)
action[j] = scale[j] * value(fields[j]), clipped to [-1, 1]. The operator is in control while
its latest message is younger than `timeout_s` and, when `engage` names a field (a deadman
button such as "buttons.4"), that field is > 0.5. A message with NaN or inf in a mapped field,
or a Joy message too short for the mapping, is dropped with a logged warning (the previous
message stays the latest); it never reaches the robot.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_bridge.transport import COMMAND_QOS, Transport
from sims.vecenv import EnvError

TELEOP_TYPES = ("geometry_msgs/msg/Twist", "sensor_msgs/msg/Joy")
TWIST_FIELDS = tuple(f"{g}.{a}" for g in ("linear", "angular") for a in "xyz")


@dataclass
class TeleopConfig:
    topic: str = "/teleop"
    type: str = "geometry_msgs/msg/Twist"
    fields: tuple[str, ...] = ("linear.x", "linear.y", "linear.z", "angular.z")
    scale: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    engage: str | None = None  # a field that must be > 0.5 for the operator to be in control
    timeout_s: float = 0.2

    def __post_init__(self) -> None:
        if self.type not in TELEOP_TYPES:
            raise EnvError(f"teleop.type: unsupported {self.type!r}; allowed: {', '.join(TELEOP_TYPES)}")
        self.fields, self.scale = tuple(self.fields), tuple(float(s) for s in self.scale)
        if len(self.scale) != len(self.fields):
            raise EnvError(f"teleop.scale: {len(self.scale)} values for {len(self.fields)} fields")
        for f in (*self.fields, *([self.engage] if self.engage else [])):
            _parse(self.type, f)
        if not self.timeout_s > 0 or not all(math.isfinite(s) for s in self.scale):
            raise EnvError("teleop.timeout_s, teleop.scale: must be positive / finite")


def _parse(msg_type: str, name: str) -> tuple[str, Any]:
    """A field name -> (group, key): ("linear", "x") for Twist, ("axes", 2) for Joy."""
    if msg_type == TELEOP_TYPES[0]:
        if name not in TWIST_FIELDS:
            raise EnvError(f"teleop.fields: {name!r} is not a Twist field; allowed: {', '.join(TWIST_FIELDS)}")
        group, key = name.split(".")
        return group, key
    group, _, index = name.partition(".")
    if group not in ("axes", "buttons") or not index.isdigit():
        raise EnvError(f"teleop.fields: {name!r} is not a Joy field; allowed: axes.<i>, buttons.<i>")
    return group, int(index)


def _value(msg: Any, ref: tuple[str, Any]) -> float:
    group, key = ref
    if isinstance(key, int):
        return float(getattr(msg, group)[key])
    return float(getattr(getattr(msg, group), key))


class Teleop:
    """Subscribes to the teleop topic on `transport`; `action()` is the operator's action now."""

    def __init__(self, transport: Transport, cfg: TeleopConfig, topic: str | None = None):
        self.cfg = cfg
        self._refs = [_parse(cfg.type, f) for f in cfg.fields]
        self._engage = _parse(cfg.type, cfg.engage) if cfg.engage else None
        self.sub = transport.subscribe(topic or cfg.topic, cfg.type, COMMAND_QOS)
        self.sub.check = self._check

    def _check(self, msg: Any) -> str | None:
        try:
            values = [_value(msg, r) for r in self._refs + ([self._engage] if self._engage else [])]
        except (IndexError, AttributeError, TypeError, ValueError):
            return f"does not have the mapped fields {list(self.cfg.fields)}"
        return None if np.isfinite(values).all() else f"NaN or inf in {list(self.cfg.fields)}"

    def action(self, now: float | None = None) -> np.ndarray | None:
        """float64 [A] in [-1, 1] while the operator is in control, else None."""
        got = self.sub.latest()
        now = time.monotonic() if now is None else now
        if got is None or now - got.recv_time > self.cfg.timeout_s:
            return None
        if self._engage is not None and _value(got.msg, self._engage) <= 0.5:
            return None
        a = np.array([s * _value(got.msg, r) for s, r in zip(self.cfg.scale, self._refs)])
        return np.clip(a, -1.0, 1.0)


def twist(values: list[float] | np.ndarray) -> Any:
    """A geometry_msgs/Twist of up to 6 values: linear x, y, z, angular x, y, z (the operator
    node maps [dx, dy, dz, gripper] to linear xyz and angular.z)."""
    from robot_bridge import ros_types as rt

    v = [float(x) for x in values] + [0.0] * (6 - len(values))
    vec = rt.msg_class("geometry_msgs/msg/Vector3")
    return rt.msg_class("geometry_msgs/msg/Twist")(linear=vec(x=v[0], y=v[1], z=v[2]), angular=vec(x=v[3], y=v[4], z=v[5]))
