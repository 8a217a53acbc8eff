"""The transport interface: publish, subscribe, latest message with receive time, services.

Two implementations: `DdsTransport` (cyclonedds + rosbags CDR, no ROS install needed) and
`RclpyTransport` (where ROS 2 is installed); robot_bridge/transport_factory.py's
`make_transport("auto")` takes rclpy when it imports and DDS otherwise. Messages are rosbags message dataclasses (see ros_types.py);
times are `time.monotonic()` seconds of this process.

QoS as ROS 2 does it:
  SENSOR_QOS   best effort, keep last 5, volatile   (rclpy qos_profile_sensor_data)
  COMMAND_QOS  reliable, keep last 10, volatile     (rclpy default profile)
"""

from __future__ import annotations

import abc
import logging
import random
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

TRANSPORTS = ("auto", "dds", "rclpy")
log = logging.getLogger("robot_bridge.transport")


class TransportError(RuntimeError):
    """A transport that cannot start, a service that does not answer (one line)."""


@dataclass(frozen=True)
class QosProfile:
    reliable: bool
    depth: int
    transient_local: bool = False


SENSOR_QOS = QosProfile(reliable=False, depth=5)
COMMAND_QOS = QosProfile(reliable=True, depth=10)


@dataclass
class Received:
    """One received message: the message, its monotonic receive time, its 1-based count."""

    msg: Any
    recv_time: float
    seq: int


class Subscription:
    """Holds the latest message of a topic and wakes waiters; callbacks run on the transport's
    receive thread (keep them short; do not publish from them on DDS).

    check: msg -> None (fine) or a reason; a message with a reason is dropped with a logged
    warning (the first ten, then at powers of two) and counted in `rejected`, so that `latest`
    only ever holds a usable message."""

    def __init__(self, topic: str, msg_type: str, callback: Callable[[Any], None] | None = None,
                 check: Callable[[Any], str | None] | None = None):
        self.topic, self.msg_type, self.callback, self.check = topic, msg_type, callback, check
        self._latest: Received | None = None
        self._cond = threading.Condition()
        self.count = 0
        self.rejected = 0
        self.last_rejection = ""  # why the last dropped message was dropped

    def _deliver(self, msg: Any) -> None:
        why = self.check(msg) if self.check is not None else None
        if why is not None:
            self.rejected += 1
            self.last_rejection = why
            n = self.rejected
            if n <= 10 or (n & (n - 1)) == 0:
                log.warning("%s: message #%d ignored (%s)", self.topic, n, why)
            return
        now = time.monotonic()
        with self._cond:
            self.count += 1
            self._latest = Received(msg, now, self.count)
            self._cond.notify_all()
        if self.callback is not None:
            self.callback(msg)

    def latest(self) -> Received | None:
        with self._cond:
            return self._latest

    def wait_newer(self, seq: int, timeout: float) -> Received | None:
        """The latest message once its count exceeds seq, or None after timeout seconds."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._latest is None or self._latest.seq <= seq:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self._latest

    def wait_after(self, t: float, timeout: float) -> Received | None:
        """The latest message received after monotonic time t, or None after timeout seconds."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._latest is None or self._latest.recv_time <= t:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self._latest


class Publisher(abc.ABC):
    topic: str
    msg_type: str

    @abc.abstractmethod
    def publish(self, msg: Any) -> None:
        """Send one message (a rosbags dataclass of msg_type)."""


class Transport(abc.ABC):
    """One node on one ROS 2 domain."""

    name: str = "transport"

    @abc.abstractmethod
    def publisher(self, topic: str, msg_type: str, qos: QosProfile = COMMAND_QOS) -> Publisher: ...

    @abc.abstractmethod
    def subscribe(self, topic: str, msg_type: str, qos: QosProfile = SENSOR_QOS,
                  callback: Callable[[Any], None] | None = None) -> Subscription: ...

    def call_service(self, service: str, srv_type: str, request: Any, timeout: float = 5.0) -> Any:
        """Call a ROS 2 service (srv_type 'std_srvs/srv/Trigger'); returns the response message."""
        raise TransportError(f"{self.name}: services are not supported")

    def serve(self, service: str, srv_type: str, handler: Callable[[Any], Any]) -> None:
        """Answer requests of a service with handler(request) -> response."""
        raise TransportError(f"{self.name}: services are not supported")

    @abc.abstractmethod
    def close(self) -> None:
        """Leave the domain; no traffic afterwards."""

    def __enter__(self) -> "Transport":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


LOOPBACK_XML = (
    '<CycloneDDS><Domain id="any"><General><Interfaces><NetworkInterface name="lo"/></Interfaces>'
    "<AllowMulticast>false</AllowMulticast></General><Discovery><Peers><Peer address=\"127.0.0.1\"/>"
    "</Peers><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>50</MaxAutoParticipantIndex>"
    "</Discovery></Domain></CycloneDDS>"
)


def loopback_config(directory: str | Path | None = None) -> str:
    """Write the loopback-only Cyclone config; returns a CYCLONEDDS_URI value (file://...)."""
    directory = Path(directory or tempfile.gettempdir())
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "cyclonedds_loopback.xml"
    path.write_text(LOOPBACK_XML)
    return path.resolve().as_uri()


def loopback_env(domain_id: int | None = None, directory: str | Path | None = None) -> dict[str, str]:
    """Environment variables that keep DDS on loopback: CYCLONEDDS_URI and ROS_DOMAIN_ID
    (a random domain in [100, 199] when none is given). Apply them before the first participant."""
    dom = random.randint(100, 199) if domain_id is None else int(domain_id)
    return {"CYCLONEDDS_URI": loopback_config(directory), "ROS_DOMAIN_ID": str(dom)}
