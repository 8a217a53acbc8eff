"""DDS-native transport on cyclonedds, speaking ROS 2's wire format without a ROS install.

Topics and readers/writers are created with cyclonedds `IdlStruct` types built from rosbags'
message definitions (ros_types.idl_struct), so type names and type information are those
of ROS 2. Samples travel as CDR bytes made and read by rosbags (numpy arrays, fast for
images); ros_types' tests prove cyclonedds' own serialiser gives the same bytes.

Services follow rmw_cyclonedds: requests on `rq/<name>Request`, replies on `rr/<name>Reply`
(reliable, keep last 10), each payload prefixed by a 16-byte request header (uint64 client id:
the request writer's instance handle, int64 sequence number) after the CDR encapsulation
header. A client's request writer and reply reader carry the user data `clientid=<id>;`. A
call waits for the service (its request reader and reply writer matched), sends the request
once and waits for the reply; the server, before answering, waits up to 100 ms for its reply
writer to match the reader tagged with the request writer's clientid.

Services do not cross middlewares (rmw_fastrtps pairs request and reply through the RTPS sample
identity, which cyclonedds-python cannot write or read): a service peer whose GUID names another
DDS vendor (Fast DDS: 01.0f) gets one line naming the cause and the fix (the rclpy transport), as a
TransportError for a client and a logged warning for a server, never a bare timeout.

The participant carries the user data `enclave=/;` and publishes `ros_discovery_info`
(ros_graph.py, in the gid layout of $ROS_DISTRO), so ROS 2 tools list the node. A sample that does not decode, or whose
callback raises, is dropped with a logged warning: no message can stop a reader.
"""

from __future__ import annotations

import itertools
import logging
import queue
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

from robot_bridge import ros_graph
from robot_bridge import ros_types as rt
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS, Publisher, QosProfile, Subscription, Transport, TransportError

log = logging.getLogger("robot_bridge.dds")
_ANY = SampleState.Any | ViewState.Any | InstanceState.Any
_REQ_HEADER = struct.Struct("<Qq")  # client id (request writer's instance handle), sequence number
_U64 = (1 << 64) - 1
REPLY_READER_WAIT_S = 0.1  # rmw_cyclonedds: wait up to 100 ms for the client's reply reader
# DDS vendor ids (the first two bytes of a GUID prefix, as both Cyclone DDS and Fast DDS write it)
VENDORS = {b"\x01\x01": "RTI Connext DDS", b"\x01\x0f": "Fast DDS", b"\x01\x10": "Cyclone DDS",
           b"\x01\x03": "OpenDDS", b"\x01\x02": "OpenSplice"}
CYCLONE = b"\x01\x10"


def foreign_service_peer(service: str, vendor: bytes, role: str) -> str:
    """One line: why a service peer of another middleware cannot be answered, and the fix."""
    name = VENDORS.get(vendor, f"vendor {vendor.hex('.')}")
    return (f"service {service}: the {role} is a {name} node; ROS 2 services do not cross middlewares "
            f"(rmw_cyclonedds puts a request header in the payload, rmw_fastrtps pairs request and reply "
            f"through the RTPS sample identity, which the dds transport cannot send or read); use "
            f"--transport rclpy with ROS 2 installed or its wheels (make ros2, docs/ros2.md), or run the "
            f"other node with RMW_IMPLEMENTATION=rmw_cyclonedds_cpp")


def dds_qos(p: QosProfile, user_data: bytes | None = None) -> Qos:
    """The cyclonedds QoS of a ROS 2 profile (XCDR1 data representation, as rmw_cyclonedds)."""
    rel = (Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100)) if p.reliable
           else Policy.Reliability.BestEffort)
    dur = Policy.Durability.TransientLocal if p.transient_local else Policy.Durability.Volatile
    policies = [rel, Policy.History.KeepLast(p.depth), dur, Policy.DataRepresentation(use_cdrv0_representation=True)]
    if user_data:
        policies.append(Policy.Userdata(user_data))
    return Qos(*policies)


def _user_data(qos: Qos) -> bytes:
    return qos[Policy.Userdata].data if Policy.Userdata in qos else b""


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
    """One cyclonedds participant on `domain_id`, announced as the ROS 2 node `node_name`;
    configure the network with CYCLONEDDS_URI (transport.loopback_env() for tests)."""

    name = "dds"

    def __init__(self, domain_id: int = 0, node_name: str = "embodied", ros_distro: str | None = None):
        self.domain_id, self.node_name = domain_id, node_name
        self.distro = ros_graph.graph_distro(ros_distro)  # the graph's gid layout (ros_graph.py)
        try:
            self.participant = DomainParticipant(domain_id, qos=Qos(Policy.Userdata(ros_graph.ENCLAVE_USER_DATA)))
        except Exception as e:  # cyclonedds raises DDSException for a bad config
            raise TransportError(f"dds: cannot join domain {domain_id} ({e}); check CYCLONEDDS_URI") from None
        self._topics: dict[str, Topic] = {}
        self._entities: list[Any] = []
        self._lock = threading.RLock()
        self.closed = False
        self.dropped = 0  # samples that did not decode or whose callback raised
        self._seq = itertools.count(1)
        self._clients: dict[str, tuple[DataWriter, DataReader, dict[int, bytes], threading.Condition]] = {}
        self._node_readers: list[Any] = []
        self._node_writers: list[Any] = []
        self._graph = self._writer(ros_graph.DISCOVERY_TOPIC, ros_graph.DISCOVERY_TYPE, ros_graph.DISCOVERY_QOS,
                                   announce=False, distro=self.distro)
        self._announce()

    # ------------------------------------------------------------------ the ROS 2 graph
    def _announce(self) -> None:
        """Publish this node's readers and writers on ros_discovery_info."""
        with self._lock:
            if self.closed:
                return
            msg = ros_graph.participant_entities_info(self.participant.guid, self.node_name, "/",
                                                      [e.guid for e in self._node_readers],
                                                      [e.guid for e in self._node_writers], self.distro)
            ddspy_write(self._graph._ref, rt.serialize(msg, ros_graph.DISCOVERY_TYPE, self.distro))

    # ------------------------------------------------------------------ topics
    def _topic(self, dds_name: str, msg_type: str, service: bool = False, distro: str = "humble") -> Topic:
        with self._lock:
            if self.closed:
                raise TransportError("dds: transport is closed")
            t = self._topics.get(dds_name)
            if t is None:
                t = Topic(self.participant, dds_name, rt.idl_struct(msg_type, service, distro))
                self._topics[dds_name] = t
            elif t.data_type is not rt.idl_struct(msg_type, service, distro):
                raise TransportError(f"{dds_name}: already used with another type than {msg_type}")
            return t

    def _writer(self, dds_name: str, msg_type: str, qos: QosProfile, user_data: bytes | None = None,
                announce: bool = True, distro: str = "humble") -> DataWriter:
        service = dds_name.startswith(("rq/", "rr/"))
        w = DataWriter(self.participant, self._topic(dds_name, msg_type, service, distro), qos=dds_qos(qos, user_data))
        self._entities.append(w)
        if announce:
            self._node_writers.append(w)
            self._announce()
        return w

    def _dropped(self, dds_name: str, what: str, e: Exception) -> None:
        self.dropped += 1
        n = self.dropped
        if n <= 10 or (n & (n - 1)) == 0:  # the first ten, then at powers of two
            log.warning("dds: %s: ignored a sample (#%d): %s (%s: %s)", dds_name, n, what, type(e).__name__,
                        str(e)[:200])

    def _reader(self, dds_name: str, msg_type: str, qos: QosProfile, on_bytes: Callable[..., None],
                user_data: bytes | None = None, with_info: bool = False, distro: str = "humble") -> DataReader:
        """on_bytes(data) per valid sample, or on_bytes(data, sample_info) with with_info."""
        def on_data(reader: DataReader | None) -> None:
            if self.closed or reader is None:  # None: data arrived while the reader was being made
                return
            ret = ddspy_take(reader._ref, _ANY, 64)
            if isinstance(ret, int):
                return
            for data, info in ret:
                if not info.valid_data:
                    continue
                try:
                    on_bytes(data, info) if with_info else on_bytes(data)
                except Exception as e:  # a bad sample (or callback) must not stop the reader
                    self._dropped(dds_name, f"not a valid {msg_type}, or its callback failed", e)

        service = dds_name.startswith(("rq/", "rr/"))
        r = DataReader(self.participant, self._topic(dds_name, msg_type, service, distro), qos=dds_qos(qos, user_data))
        self._entities.append(r)
        self._node_readers.append(r)
        r.set_listener(Listener(on_data_available=on_data))
        on_data(r)  # what arrived before the listener was set (transient local data)
        self._announce()
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
        """Answer each request once, in arrival order, on a thread of its own (a handler may
        take long; the DDS receive thread never runs it)."""
        req_t, rep_t = f"{srv_type}_Request", f"{srv_type}_Response"
        rq, rr = rt.dds_service_topics(service)
        writer = self._writer(rr, rep_t, COMMAND_QOS)
        pending: queue.Queue[tuple[bytes, int]] = queue.Queue()
        reader = self._reader(rq, req_t, COMMAND_QOS, with_info=True,
                              on_bytes=lambda data, info: pending.put((bytes(data), info.publication_handle)))

        def reply_reader_matched(request_writer: int) -> bool:
            """rmw_cyclonedds' check: a reader our reply writer matched carries the clientid of
            the request's writer (a writer without one, or one gone, is not waited for)."""
            try:
                request_qos = reader.get_matched_publication_data(request_writer).qos
            except Exception:  # the client left
                return True
            tag = ros_graph.user_data_key(_user_data(request_qos), "clientid")
            if tag is None:
                return True
            for h in writer.get_matched_subscriptions():
                try:
                    ep = writer.get_matched_subscription_data(h)
                except Exception:
                    continue
                if ros_graph.user_data_key(_user_data(ep.qos), "clientid") == tag:
                    return True
            return False

        warned: set[bytes] = set()

        def warn_foreign_clients() -> None:
            """A client of another middleware matches our request reader, but its requests do
            not even reach us (Cyclone drops them: no request header); say so once per client."""
            for h in reader.get_matched_publications():
                try:
                    guid = reader.get_matched_publication_data(h).key.bytes
                except Exception:  # the client left
                    continue
                if guid[:2] != CYCLONE and guid not in warned:
                    warned.add(guid)
                    log.warning("%s", foreign_service_peer(service, guid[:2], "client"))

        def loop() -> None:
            next_check = 0.0
            while not self.closed:
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + 0.5
                    try:
                        warn_foreign_clients()
                    except Exception:  # closing
                        pass
                try:
                    data, request_writer = pending.get(timeout=0.05)
                except queue.Empty:
                    continue
                try:
                    head = _REQ_HEADER.unpack_from(data, 4)
                    request = rt.deserialize(data[:4] + data[4 + _REQ_HEADER.size:], req_t)
                    body = rt.serialize(handler(request), rep_t)
                except Exception as e:  # no reply; the client times out with a one-line error
                    self._dropped(rq, f"not a valid {req_t}, or the service handler failed", e)
                    continue
                end = time.monotonic() + REPLY_READER_WAIT_S
                while not reply_reader_matched(request_writer) and time.monotonic() < end:
                    time.sleep(0.01)
                if not self.closed:
                    ddspy_write(writer._ref, body[:4] + _REQ_HEADER.pack(*head) + body[4:])

        threading.Thread(target=loop, daemon=True, name=f"serve{service}").start()

    def _client(self, service: str, req_t: str, rep_t: str) -> tuple[DataWriter, DataReader, dict, threading.Condition]:
        """One request writer and reply reader per service, tagged with one clientid."""
        if service not in self._clients:
            rq, rr = rt.dds_service_topics(service)
            tag = f"clientid={self.participant.guid.hex}.{len(self._clients)};".encode()
            writer = self._writer(rq, req_t, COMMAND_QOS, user_data=tag)
            own = writer.instance_handle & _U64  # the client id of its requests
            replies: dict[int, bytes] = {}
            cond = threading.Condition()

            def on_reply(data: bytes) -> None:
                guid, s = _REQ_HEADER.unpack_from(data, 4)
                if guid == own:
                    with cond:
                        replies[s] = bytes(data)
                        cond.notify_all()

            reader = self._reader(rr, rep_t, COMMAND_QOS, on_reply, user_data=tag)
            self._clients[service] = (writer, reader, replies, cond)
        return self._clients[service]

    def call_service(self, service: str, srv_type: str, request: Any, timeout: float = 5.0) -> Any:
        """Wait for the service, send the request once (reliable), wait for its reply."""
        req_t, rep_t = f"{srv_type}_Request", f"{srv_type}_Response"
        writer, reader, replies, cond = self._client(service, req_t, rep_t)
        end = time.monotonic() + timeout
        while not (writer.get_matched_subscriptions() and reader.get_matched_publications()):
            if time.monotonic() >= end:
                raise TransportError(f"service {service}: not available within {timeout:.1f} s (is its server "
                                     f"running on domain {self.domain_id}? a ROS 2 Kilted node on Fast DDS 3 is "
                                     f"not matched by the dds transport: use --transport rclpy, docs/ros2.md)")
            time.sleep(0.01)
        for h in writer.get_matched_subscriptions():
            try:
                vendor = writer.get_matched_subscription_data(h).key.bytes[:2]
            except Exception:  # the server left
                continue
            if vendor != CYCLONE:
                raise TransportError(foreign_service_peer(service, vendor, "server"))
        seq = next(self._seq)
        body = rt.serialize(request, req_t)
        with cond:
            ddspy_write(writer._ref, body[:4] + _REQ_HEADER.pack(writer.instance_handle & _U64, seq) + body[4:])
            while seq not in replies and time.monotonic() < end:
                cond.wait(max(end - time.monotonic(), 0.0))
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
