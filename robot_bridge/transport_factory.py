"""`make_transport`: a node's transport, rclpy where ROS 2 imports and DDS otherwise. It lives
apart from the interface (transport.py) that both implementations import."""

from __future__ import annotations

import os

from robot_bridge.transport import TRANSPORTS, Transport, TransportError


def rclpy_available() -> bool:
    try:
        import rclpy  # noqa: F401
    except ImportError:
        return False
    return True


def make_transport(kind: str = "auto", domain_id: int | None = None, node_name: str = "embodied") -> Transport:
    """kind: "dds", "rclpy", or "auto" (rclpy when `import rclpy` works, else dds).
    domain_id: the ROS 2 domain (default: $ROS_DOMAIN_ID or 0)."""
    if kind not in TRANSPORTS:
        raise TransportError(f"transport: unknown {kind!r}; allowed: {', '.join(TRANSPORTS)}")
    if domain_id is None:
        domain_id = int(os.environ.get("ROS_DOMAIN_ID", "0") or 0)
    if not 0 <= int(domain_id) <= 232:
        raise TransportError(f"domain_id: expected an int in [0, 232], got {domain_id}")
    if kind == "rclpy" or (kind == "auto" and rclpy_available()):
        from robot_bridge.rclpy_transport import RclpyTransport

        return RclpyTransport(int(domain_id), node_name)
    from robot_bridge.dds import DdsTransport

    return DdsTransport(int(domain_id), node_name)
