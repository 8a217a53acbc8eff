"""Operator labels during on-robot RL (config section `labels`): "this episode succeeded" or
"this episode failed", from a ROS 2 topic or the actor's terminal.

  std_msgs/msg/String   data == labels.success or labels.failure (e.g. a keyboard node publishing
                        "success" / "failure")
  sensor_msgs/msg/Joy   labels.success / labels.failure name buttons ("buttons.1"); a press
                        (0 -> 1) is one label, a held button is not repeated
  terminal              labels.terminal: a line "s" or "f" (then Enter) typed in the actor's terminal

The actor takes the newest label given since the episode started, after each step of a
training episode: "success" ends the episode there as a success (reward 1, terminated),
"failure" ends it as a failure (reward 0, truncated: the critic bootstraps from the last
state), and the robot is reset. Labels given during a held-out evaluation are dropped."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from robot_bridge.transport import COMMAND_QOS, Transport
from sims.vecenv import EnvError

LABEL_TYPES = ("std_msgs/msg/String", "sensor_msgs/msg/Joy")
log = logging.getLogger("embodied.robot_rl.labels")


def _button(name: str) -> int:
    group, _, index = name.partition(".")
    if group != "buttons" or not index.isdigit():
        raise EnvError(f"labels: {name!r} is not a Joy button; allowed: buttons.<i>")
    return int(index)


@dataclass
class LabelConfig:
    topic: str | None = "/labels"  # None: the terminal only
    type: str = "std_msgs/msg/String"
    success: str = "success"  # the String's text, or a Joy button ("buttons.1")
    failure: str = "failure"
    terminal: bool = False  # also read "s" / "f" lines from the actor's standard input

    def __post_init__(self) -> None:
        if self.type not in LABEL_TYPES:
            raise EnvError(f"labels.type: unsupported {self.type!r}; allowed: {', '.join(LABEL_TYPES)}")
        if self.type == LABEL_TYPES[1]:
            _button(self.success), _button(self.failure)
        if self.success == self.failure:
            raise EnvError(f"labels.success, labels.failure: both are {self.success!r}")
        if self.topic is None and not self.terminal:
            raise EnvError("labels.topic: null needs labels.terminal: true (no source of labels)")


class Labels:
    """Collects labels as they come; `take(since)` gives the newest one after `since` (monotonic
    seconds) and forgets every label so far."""

    def __init__(self, cfg: LabelConfig, transport: Transport | None, topic: str | None = None):
        self.cfg = cfg
        self._events: deque[tuple[float, str]] = deque(maxlen=100)
        self._lock = threading.Lock()
        self._pressed = {"success": False, "failure": False}
        if cfg.topic is not None:
            if transport is None:
                raise EnvError("labels.topic: needs the robot's ROS 2 transport; with sim, allowed: null "
                               "(labels.terminal: true)")
            transport.subscribe(topic or cfg.topic, cfg.type, COMMAND_QOS, callback=self._on_message)
        if cfg.terminal:
            threading.Thread(target=self._read_terminal, daemon=True, name="labels-terminal").start()

    def give(self, label: str, t: float | None = None) -> None:
        with self._lock:
            self._events.append((time.monotonic() if t is None else t, label))

    def _on_message(self, msg: Any) -> None:
        if self.cfg.type == LABEL_TYPES[0]:
            text = str(msg.data).strip().lower()
            for label in ("success", "failure"):
                if text == getattr(self.cfg, label).lower():
                    self.give(label)
            return
        for label in ("success", "failure"):  # Joy: a press is a rising edge
            i = _button(getattr(self.cfg, label))
            down = len(msg.buttons) > i and msg.buttons[i] > 0.5
            if down and not self._pressed[label]:
                self.give(label)
            self._pressed[label] = down

    def _read_terminal(self) -> None:
        try:
            for line in sys.stdin:
                key = line.strip().lower()[:1]
                if key in ("s", "f"):
                    self.give("success" if key == "s" else "failure")
                    log.info("labels: %s", "success" if key == "s" else "failure")
        except (OSError, ValueError) as e:  # no terminal (a service, a test runner)
            log.warning("labels: the terminal cannot be read (%s); labels from the topic only", e)

    def take(self, since: float) -> str | None:
        with self._lock:
            newest = next((label for t, label in reversed(self._events) if t > since), None)
            self._events.clear()
        return newest
