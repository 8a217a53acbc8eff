"""DDS-native transport on cyclonedds, speaking ROS 2's wire format without a ROS install.

Topics and readers/writers are created with cyclonedds `IdlStruct` types built from rosbags'
message definitions (ros_types.idl_struct), so type names and type information are those
of ROS 2. Samples travel as CDR bytes made and read by rosbags (numpy arrays, fast for
images); ros_types' tests prove cyclonedds' own serialiser gives the same bytes.

Services follow rmw_cyclonedds: requests on `rq/<name>Request`, replies on `rr/<name>Reply`,
each payload prefixed by a 16-byte request header (uint64 client guid, int64 sequence
number) after the CDR encapsulation header.
"""

from __future__ import annotations

import itertools
import os
import struct
import threading
import time
from typing import Any, Callable

from cyclonedds._clayer import ddspy_take, ddspy_write
from cyclonedds.core import InstanceState, Listener, SampleState, ViewState
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from robot_bridge import ros_types as rt
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS, Publisher, QosProfile, Subscription, Transport, TransportError

_ANY = SampleState.Any | ViewState.Any | InstanceState.Any
_REQ_HEADER = struct.Struct("<Qq")  # client guid, sequence number


def dds_qos(p: QosProfile) -> Qos:
    """The cyclonedds QoS of a ROS 2 profile (XCDR1 data representation, as rmw_cyclonedds)."""
    rel = (Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100)) if p.reliable
           else Policy.Reliability.BestEffort)
    dur = Policy.Durability.TransientLocal if p.transient_local else Policy.Durability.Volatile
    return Qos(rel, Policy.History.KeepLast(p.depth), dur,
               Policy.DataRepresentation(use_cdrv0_representation=True))


class DdsPublisher(Publisher):
    def __init__(self, transport: "DdsTransport", topic: str, msg_type: str, writer: DataWriter):
        self.topic, self.msg_type, self._writer, self._transport = topic, msg_type, writer, transport

    def publish(self, msg: Any) -> None:
        self.publish_raw(rt.serialize(msg, self.msg_type))

    def publish_raw(self, data: bytes) -> None:
        """Send pre-serialised CDR bytes (with the 4-byte encapsulation header)."""
        if self._transport.closed:
            raise TransportError(f"{self.topic}: transport is closed")
        ret = ddspy_write(self._writer._ref, data)
        if ret < 0:
            raise TransportError(f"{self.topic}: DDS write failed (code {ret})")


class DdsTransport(Transport):
    """One cyclonedds participant on `domain_id`; configure the network with CYCLONEDDS_URI
    (transport.loopback_env() for tests)."""

    name = "dds"

    def __init__(self, domain_id: int = 0, node_name: str = "embodied"):
        self.domain_id, self.node_name = domain_id, node_name
        try:
            self.participant = DomainParticipant(domain_id)
        except Exception as e:  # cyclonedds raises DDSException for a bad config
            raise TransportError(f"dds: cannot join domain {domain_id} ({e}); check CYCLONEDDS_URI") from None
        self._topics: dict[str, Topic] = {}
        self._entities: list[Any] = []
        self._lock = threading.Lock()
        self.closed = False
        self._guid = (os.getpid() << 32) ^ (id(self) & 0xFFFFFFFF)
        self._seq = itertools.count(1)
        self._clients: dict[str, tuple[DataWriter, dict[int, bytes], threading.Condition]] = {}

    # ------------------------------------------------------------------ topics
    def _topic(self, dds_name: str, msg_type: str, service: bool = False) -> Topic:
        with self._lock:
            if self.closed:
                raise TransportError("dds: transport is closed")
            t = self._topics.get(dds_name)
            if t is None:
                t = Topic(self.participant, dds_name, rt.idl_struct(msg_type, service))
                self._topics[dds_name] = t
            elif t.data_type is not rt.idl_struct(msg_type, service):
                raise TransportError(f"{dds_name}: already used with another type than {msg_type}")
            return t

    def _writer(self, dds_name: str, msg_type: str, qos: QosProfile) -> DataWriter:
        service = dds_name.startswith(("rq/", "rr/"))
        w = DataWriter(self.participant, self._topic(dds_name, msg_type, service), qos=dds_qos(qos))
        self._entities.append(w)
        return w

    def _reader(self, dds_name: str, msg_type: str, qos: QosProfile, on_bytes: Callable[[bytes], None]) -> DataReader:
        def on_data(reader: DataReader) -> None:
            if self.closed:
                return
            ret = ddspy_take(reader._ref, _ANY, 64)
            if isinstance(ret, int):
                return
            for data, info in ret:
                if info.valid_data:
                    on_bytes(data)

        service = dds_name.startswith(("rq/", "rr/"))
        r = DataReader(self.participant, self._topic(dds_name, msg_type, service), qos=dds_qos(qos),
                       listener=Listener(on_data_available=on_data))
        self._entities.append(r)
        return r

    def publisher(self, topic: str, msg_type: str, qos: QosProfile = COMMAND_QOS) -> DdsPublisher:
        msg_type = rt.normalize_type(msg_type)
        return DdsPublisher(self, topic, msg_type, self._writer(rt.dds_topic_name(topic), msg_type, qos))

    def subscribe(self, topic: str, msg_type: str, qos: QosProfile = SENSOR_QOS,
                  callback: Callable[[Any], None] | None = None) -> Subscription:
        msg_type = rt.normalize_type(msg_type)
        sub = Subscription(topic, msg_type, callback)
        self._reader(rt.dds_topic_name(topic), msg_type, qos, lambda b: sub._deliver(rt.deserialize(b, msg_type)))
        return sub

    def subscribe_raw(self, topic: str, msg_type: str, on_bytes: Callable[[bytes], None],
                      qos: QosProfile = SENSOR_QOS) -> None:
        """Receive the CDR bytes of a topic exactly as they came off the wire."""
        self._reader(rt.dds_topic_name(topic), rt.normalize_type(msg_type), qos, on_bytes)

    # ------------------------------------------------------------------ services
    def serve(self, service: str, srv_type: str, handler: Callable[[Any], Any]) -> None:
        req_t, rep_t = f"{srv_type}_Request", f"{srv_type}_Response"
        rq, rr = rt.dds_service_topics(service)
        writer = self._writer(rr, rep_t, COMMAND_QOS)
        pending: list[bytes] = []
        answered: dict[tuple[int, int], bytes] = {}  # clients resend until answered: run once
        cond = threading.Condition()

        def on_request(data: bytes) -> None:
            with cond:
                pending.append(bytes(data))
                cond.notify()

        def loop() -> None:  # answers outside the DDS receive thread (no writes in listeners)
            while not self.closed:
                with cond:
                    if not pending:
                        cond.wait(0.05)
                        continue
                    data = pending.pop(0)
                head = _REQ_HEADER.unpack_from(data, 4)
                if head not in answered:
                    request = rt.deserialize(data[:4] + data[4 + _REQ_HEADER.size:], req_t)
                    body = rt.serialize(handler(request), rep_t)
                    answered[head] = body[:4] + _REQ_HEADER.pack(*head) + body[4:]
                    if len(answered) > 256:
                        answered.pop(next(iter(answered)))
                if not self.closed:
                    ddspy_write(writer._ref, answered[head])

        self._reader(rq, req_t, COMMAND_QOS, on_request)
        threading.Thread(target=loop, daemon=True, name=f"serve{service}").start()

    def call_service(self, service: str, srv_type: str, request: Any, timeout: float = 5.0) -> Any:
        req_t, rep_t = f"{srv_type}_Request", f"{srv_type}_Response"
        if service not in self._clients:  # one request writer and reply reader per service
            rq, rr = rt.dds_service_topics(service)
            replies: dict[int, bytes] = {}
            cond = threading.Condition()

            def on_reply(data: bytes) -> None:
                guid, s = _REQ_HEADER.unpack_from(data, 4)
                if guid == self._guid:
                    with cond:
                        replies[s] = bytes(data)
                        cond.notify_all()

            self._reader(rr, rep_t, COMMAND_QOS, on_reply)
            self._clients[service] = (self._writer(rq, req_t, COMMAND_QOS), replies, cond)
        writer, replies, cond = self._clients[service]
        seq = next(self._seq)
        body = rt.serialize(request, req_t)
        data = body[:4] + _REQ_HEADER.pack(self._guid, seq) + body[4:]
        end = time.monotonic() + timeout
        with cond:
            while seq not in replies and time.monotonic() < end:  # resend until answered
                ddspy_write(writer._ref, data)
                cond.wait(min(0.2, max(end - time.monotonic(), 0)))
            reply = replies.pop(seq, None)
        if reply is None:
            raise TransportError(f"service {service}: no reply within {timeout:.1f} s")
        return rt.deserialize(reply[:4] + reply[4 + _REQ_HEADER.size:], rep_t)

    def close(self) -> None:
        """Delete the participant (and with it every reader and writer): no more traffic."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        p = self.participant
        if p._ref in p._entities:
            del p._entities[p._ref]
            p._delete(p._ref)
        for e in self._entities + list(self._topics.values()):
            e._entities.pop(e._ref, None)  # already deleted with the participant
        self._entities.clear()
        self._topics.clear()
