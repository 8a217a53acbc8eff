"""What makes a DDS participant a ROS 2 node that `ros2 node list` shows (rmw_dds_common's
graph, as rmw_cyclonedds fills it).

  participant user data   `enclave=/;`   marks the participant as a ROS 2 context
  topic `ros_discovery_info`             (no rt/ prefix) rmw_dds_common/msg/ParticipantEntitiesInfo,
                                         reliable, transient local, keep last 1: the participant's
                                         gid and, per node, its namespace, name and the gids of
                                         its readers and writers; republished on every change

A gid is the entity's 16-byte DDS GUID followed by zeros: 24 bytes in Humble's
rmw_dds_common/msg/Gid (the definition rosbags' Humble store has). Iron and later shortened
Gid to 16 bytes, so their graph caches do not read this message.
"""

from __future__ import annotations

import uuid

import numpy as np

from robot_bridge import ros_types as rt
from robot_bridge.transport import QosProfile

DISCOVERY_TOPIC = "ros_discovery_info"
DISCOVERY_TYPE = "rmw_dds_common/msg/ParticipantEntitiesInfo"
DISCOVERY_QOS = QosProfile(reliable=True, depth=1, transient_local=True)
ENCLAVE_USER_DATA = b"enclave=/;"
GID_SIZE = 24


def gid(guid: uuid.UUID) -> object:
    """rmw_dds_common/msg/Gid of a DDS GUID (16 bytes, then zeros)."""
    data = np.zeros(GID_SIZE, np.uint8)
    data[:16] = np.frombuffer(guid.bytes, np.uint8)
    return rt.msg_class("rmw_dds_common/msg/Gid")(data=data)


def participant_entities_info(participant: uuid.UUID, node_name: str, namespace: str,
                              readers: list[uuid.UUID], writers: list[uuid.UUID]) -> object:
    """The ros_discovery_info message of a participant holding one node."""
    node = rt.msg_class("rmw_dds_common/msg/NodeEntitiesInfo")(
        node_namespace=namespace, node_name=node_name,
        reader_gid_seq=[gid(g) for g in readers], writer_gid_seq=[gid(g) for g in writers])
    return rt.msg_class(DISCOVERY_TYPE)(gid=gid(participant), node_entities_info_seq=[node])


def user_data_key(data: bytes, key: str) -> str | None:
    """The value of `key` in DDS user data written as `k1=v1;k2=v2;` (rmw convention), or None."""
    for item in bytes(data).decode("utf-8", "replace").split(";"):
        k, sep, v = item.partition("=")
        if sep and k == key:
            return v
    return None
