"""Operator labels during on-robot RL (config section `labels`): "this episode succeeded",
"this episode failed" or "reset the robot now", from a ROS 2 topic or the actor's terminal.

  std_msgs/msg/String   data == labels.success, labels.failure or labels.reset (e.g. a keyboard
                        node publishing "success" / "failure" / "reset")
  sensor_msgs/msg/Joy   labels.success / labels.failure (/ labels.reset) name buttons ("buttons.1");
                        a press (0 -> 1) is one label, a held button is not repeated
  terminal              labels.terminal: a line "s", "f" or "r" (then Enter) typed in the actor's terminal

The actor takes the newest label given since the episode started, after each step of a
training episode: "success" ends the episode there as a success (reward 1, terminated),
"failure" ends it as a failure (reward 0, truncated: the critic bootstraps from the last
state), "reset" ends it without a verdict (as a time limit: reward 0, truncated; the episode's
progress row says `label: reset`, for a robot that must be reset by hand: an object out of
reach, a cable caught), and the robot is reset. Labels given during a held-out evaluation are
dropped."""

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
LABELS = ("success", "failure", "reset")
KEYS = {"s": "success", "f": "failure", "r": "reset"}  # labels.terminal
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
    reset: str | None = None  # the String's text or a Joy button; None: "reset" (String), no button (Joy)
    terminal: bool = False  # also read "s" / "f" / "r" lines from the actor's standard input

    def __post_init__(self) -> None:
        if self.type not in LABEL_TYPES:
            raise EnvError(f"labels.type: unsupported {self.type!r}; allowed: {', '.join(LABEL_TYPES)}")
        if self.reset is None and self.type == LABEL_TYPES[0]:
            self.reset = "reset"
        given = {k: getattr(self, k) for k in LABELS if getattr(self, k) is not None}
        if self.type == LABEL_TYPES[1]:
            for v in given.values():
                _button(v)
        same = [k for k in given if list(given.values()).count(given[k]) > 1]
        if same:
            raise EnvError(f"labels.{', labels.'.join(same)}: the same {given[same[0]]!r}; each label needs its own")
        if self.topic is None and not self.terminal:
            raise EnvError("labels.topic: null needs labels.terminal: true (no source of labels)")


class Labels:
    """Collects labels as they come; `take(since)` gives the newest one after `since` (monotonic
    seconds) and forgets every label so far."""

    def __init__(self, cfg: LabelConfig, transport: Transport | None, topic: str | None = None):
        self.cfg = cfg
        self._events: deque[tuple[float, str]] = deque(maxlen=100)
        self._lock = threading.Lock()
        self._pressed = {label: False for label in LABELS}
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
            for label in LABELS:
                if getattr(self.cfg, label) is not None and text == getattr(self.cfg, label).lower():
                    self.give(label)
            return
        for label in LABELS:  # Joy: a press is a rising edge
            if getattr(self.cfg, label) is None:
                continue
            i = _button(getattr(self.cfg, label))
            down = len(msg.buttons) > i and msg.buttons[i] > 0.5
            if down and not self._pressed[label]:
                self.give(label)
            self._pressed[label] = down

    def _read_terminal(self) -> None:
        try:
            for line in sys.stdin:
                key = line.strip().lower()[:1]
                if key in KEYS:
                    self.give(KEYS[key])
                    log.info("labels: %s", KEYS[key])
        except (OSError, ValueError) as e:  # no terminal (a service, a test runner)
            log.warning("labels: the terminal cannot be read (%s); labels from the topic only", e)

    def take(self, since: float) -> str | None:
        with self._lock:
            newest = next((label for t, label in reversed(self._events) if t > since), None)
            self._events.clear()
        return newest
