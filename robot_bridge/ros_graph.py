"""What makes a DDS participant a ROS 2 node that `ros2 node list` shows (rmw_dds_common's
graph, as rmw_cyclonedds and rmw_fastrtps fill it).

  participant user data   `enclave=/;`   marks the participant as a ROS 2 context
  topic `ros_discovery_info`             (no rt/ prefix) rmw_dds_common/msg/ParticipantEntitiesInfo,
                                         reliable, transient local, keep last 1: the participant's
                                         gid and, per node, its namespace, name and the gids of
                                         its readers and writers; republished on every change

A gid is the entity's 16-byte DDS GUID; Humble's rmw_dds_common/msg/Gid has 24 bytes (the GUID
then zeros), Iron and later 16. A reader of the other layout drops the samples, and the node
names vanish from its graph, so the layout is the one of the distribution the user runs:
`ros_distro` (make_transport's argument), else $ROS_DISTRO (set by sourcing ROS 2), else
DEFAULT_DISTRO.
"""

from __future__ import annotations

import os
import uuid

import numpy as np

from robot_bridge import ros_types as rt
from robot_bridge.transport import QosProfile, TransportError

DISCOVERY_TOPIC = "ros_discovery_info"
DISCOVERY_TYPE = "rmw_dds_common/msg/ParticipantEntitiesInfo"
DISCOVERY_QOS = QosProfile(reliable=True, depth=1, transient_local=True)
ENCLAVE_USER_DATA = b"enclave=/;"
DEFAULT_DISTRO = "jazzy"
# The gid size of each distribution; later ones keep Iron's 16 bytes (rolling: the newest store).
GID_SIZES = {"humble": 24, "iron": 16, "jazzy": 16, "kilted": 16, "rolling": 16}


def graph_distro(ros_distro: str | None = None) -> str:
    """The distribution whose graph layout to speak: the argument, else $ROS_DISTRO, else
    DEFAULT_DISTRO; the rosbags store to use for it (rolling: kilted's)."""
    name = (ros_distro or os.environ.get("ROS_DISTRO") or DEFAULT_DISTRO).strip().lower()
    if name not in GID_SIZES:
        raise TransportError(f"ROS_DISTRO: unknown ROS 2 distribution {name!r}; allowed: {', '.join(GID_SIZES)}")
    return "kilted" if name == "rolling" else name


def gid(guid: uuid.UUID, distro: str = DEFAULT_DISTRO) -> object:
    """rmw_dds_common/msg/Gid of a DDS GUID in the distribution's layout (16 bytes, then zeros
    up to 24 in Humble)."""
    data = np.zeros(GID_SIZES[distro], np.uint8)
    data[:16] = np.frombuffer(guid.bytes, np.uint8)
    return rt.msg_class("rmw_dds_common/msg/Gid", distro)(data=data)


def participant_entities_info(participant: uuid.UUID, node_name: str, namespace: str,
                              readers: list[uuid.UUID], writers: list[uuid.UUID],
                              distro: str = DEFAULT_DISTRO) -> object:
    """The ros_discovery_info message of a participant holding one node."""
    node = rt.msg_class("rmw_dds_common/msg/NodeEntitiesInfo", distro)(
        node_namespace=namespace, node_name=node_name,
        reader_gid_seq=[gid(g, distro) for g in readers], writer_gid_seq=[gid(g, distro) for g in writers])
    return rt.msg_class(DISCOVERY_TYPE, distro)(gid=gid(participant, distro), node_entities_info_seq=[node])


def user_data_key(data: bytes, key: str) -> str | None:
    """The value of `key` in DDS user data written as `k1=v1;k2=v2;` (rmw convention), or None."""
    for item in bytes(data).decode("utf-8", "replace").split(";"):
        k, sep, v = item.partition("=")
        if sep and k == key:
            return v
    return None
