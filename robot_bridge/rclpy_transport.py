"""rclpy transport, where ROS 2 is installed (imported lazily by transport_factory.make_transport).

Messages stay rosbags dataclasses: publishers send rosbags' CDR bytes through rclpy's raw
publish (`Publisher.publish(bytes)`), subscriptions are created with `raw=True` and decoded
by rosbags, so both transports hand the same objects to the bridge. Services convert through
rclpy.serialization. A MultiThreadedExecutor spins the node on a background thread. As in the
DDS transport, a message that does not decode, or a callback or service handler that raises, is
logged and dropped (an exception would otherwise end the executor's thread).
Not exercised by the tests (no ROS 2 here); written against the Humble rclpy API.
"""

from __future__ import annotations

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
    from rosidl_runtime_py.utilities import get_message, get_service

    parts = ros_type.split("/")
    return get_service(ros_type) if len(parts) == 3 and parts[1] == "srv" else get_message(rt.normalize_type(ros_type))


class RclpyPublisher(Publisher):
    def __init__(self, pub: Any, topic: str, msg_type: str):
        self._pub, self.topic, self.msg_type = pub, topic, msg_type

    def publish(self, msg: Any) -> None:
        self._pub.publish(rt.serialize(msg, self.msg_type))  # raw CDR (rclpy >= Humble)


class RclpyTransport(Transport):
    name = "rclpy"

    def __init__(self, domain_id: int = 0, node_name: str = "embodied"):
        import rclpy
        from rclpy.executors import MultiThreadedExecutor

        self.domain_id = domain_id
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node(node_name, context=self.context)
        self.executor = MultiThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # the context was shut down
            pass

    def publisher(self, topic: str, msg_type: str, qos: QosProfile = COMMAND_QOS) -> Publisher:
        msg_type = rt.normalize_type(msg_type)
        return RclpyPublisher(self.node.create_publisher(_ros_class(msg_type), topic, _qos(qos)), topic, msg_type)

    def subscribe(self, topic: str, msg_type: str, qos: QosProfile = SENSOR_QOS,
                  callback: Callable[[Any], None] | None = None) -> Subscription:
        msg_type = rt.normalize_type(msg_type)
        sub = Subscription(topic, msg_type, callback)

        def on_raw(data: bytes) -> None:
            try:
                sub._deliver(rt.deserialize(data, msg_type))
            except Exception as e:  # a bad sample (or callback) must not end the executor
                log.warning("rclpy: %s: ignored a message that is not a valid %s (%s: %s)", topic, msg_type,
                            type(e).__name__, str(e)[:200])

        self.node.create_subscription(_ros_class(msg_type), topic, on_raw, _qos(qos), raw=True)
        return sub

    def call_service(self, service: str, srv_type: str, request: Any, timeout: float = 5.0) -> Any:
        from rclpy.serialization import deserialize_message, serialize_message

        srv = _ros_class(srv_type)
        client = self.node.create_client(srv, service)
        if not client.wait_for_service(timeout_sec=timeout):
            raise TransportError(f"service {service}: not available within {timeout:.1f} s")
        req = deserialize_message(rt.serialize(request, f"{srv_type}_Request"), srv.Request)
        future = client.call_async(req)
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        if not done.wait(timeout) or future.result() is None:
            raise TransportError(f"service {service}: no reply within {timeout:.1f} s")
        return rt.deserialize(serialize_message(future.result()), f"{srv_type}_Response")

    def serve(self, service: str, srv_type: str, handler: Callable[[Any], Any]) -> None:
        from rclpy.serialization import deserialize_message, serialize_message

        srv = _ros_class(srv_type)

        def answer(request: Any, response: Any) -> Any:
            try:
                ours = handler(rt.deserialize(serialize_message(request), f"{srv_type}_Request"))
                return deserialize_message(rt.serialize(ours, f"{srv_type}_Response"), srv.Response)
            except Exception as e:  # answer with the default response rather than end the executor
                log.warning("rclpy: service %s: handler failed (%s: %s)", service, type(e).__name__, str(e)[:200])
                return response

        self.node.create_service(srv, service, answer)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()
        self._thread.join(timeout=2)
