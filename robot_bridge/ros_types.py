"""ROS 2 message types from rosbags' type store: names, CDR bytes, cyclonedds types.

Every message is a rosbags message dataclass (`msg_class("sensor_msgs/msg/JointState")`);
its CDR bytes (XCDR1, little-endian, header `00 01 00 00`) come from rosbags. For the DDS
transport the same definitions are turned, recursively, into cyclonedds `IdlStruct`
classes named the ROS 2 way (`sensor_msgs::msg::dds_::JointState_`), so that the topic's
type name and type information are those of a ROS 2 node; the tests check that
cyclonedds' serialiser and rosbags' produce identical bytes for these classes.

Name mapping (ROS 2 / rmw conventions):
  topic   /x                 -> DDS topic  rt/x
  service /s                 -> DDS topics rq/sRequest, rr/sReply
  type    pkg/msg/Name       -> DDS type   pkg::msg::dds_::Name_
"""

from __future__ import annotations

import functools
import time
from typing import Any, Sequence

import numpy as np
from rosbags.typesys import Stores, get_typestore, get_types_from_msg
from rosbags.typesys.base import Nodetype

# Service types are not in rosbags' store; these definitions are the ROS 2 ones.
_SRV_DEFS = {
    "std_srvs/srv/Trigger_Request": "uint8 structure_needs_at_least_one_member\n",
    "std_srvs/srv/Trigger_Response": "bool success\nstring message\n",
    "std_srvs/srv/Empty_Request": "uint8 structure_needs_at_least_one_member\n",
    "std_srvs/srv/Empty_Response": "uint8 structure_needs_at_least_one_member\n",
}


class MessageError(ValueError):
    """An unknown message type or a message that does not fit its type (one line)."""


# The distributions whose definitions differ where it matters to us: rmw_dds_common/msg/Gid
# has 24 bytes in Humble and 16 from Iron on (ros_graph.py). Every other type the bridge uses
# is the same in all of them.
DISTROS = {"humble": Stores.ROS2_HUMBLE, "iron": Stores.ROS2_IRON, "jazzy": Stores.ROS2_JAZZY,
           "kilted": Stores.ROS2_KILTED}


@functools.lru_cache(maxsize=None)
def typestore(distro: str = "humble") -> Any:
    """rosbags' type store of a ROS 2 distribution (DISTROS; Humble by default), plus std_srvs
    Trigger/Empty request and response."""
    store = get_typestore(DISTROS[distro])
    for name, text in _SRV_DEFS.items():
        if name not in store.fielddefs:  # rosbags would file it under std_srvs/srv/msg/...
            store.register({name: next(iter(get_types_from_msg(text, name).values()))})
    return store


def normalize_type(name: str) -> str:
    """'sensor_msgs/JointState' or 'sensor_msgs/msg/JointState' -> 'sensor_msgs/msg/JointState'."""
    parts = name.split("/")
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    full = "/".join(parts)
    if len(parts) != 3 or full not in typestore().fielddefs:
        raise MessageError(f"msg_type: unknown ROS 2 type {name!r}; expected pkg/msg/Name known to "
                           f"rosbags (e.g. sensor_msgs/msg/JointState)")
    return full


def dds_type_name(ros_type: str) -> str:
    """'pkg/msg/Name' -> 'pkg::msg::dds_::Name_'."""
    pkg, kind, name = normalize_type(ros_type).split("/")
    return f"{pkg}::{kind}::dds_::{name}_"


def dds_topic_name(topic: str, prefix: str = "rt") -> str:
    """ROS topic '/a/b' (or 'a/b') -> DDS topic 'rt/a/b'."""
    if not topic or topic.endswith("/") or "//" in topic or " " in topic:
        raise MessageError(f"topic: invalid ROS 2 topic name {topic!r}; expected e.g. /joint_states")
    return f"{prefix}/{topic.lstrip('/')}"


def dds_service_topics(service: str) -> tuple[str, str]:
    """ROS service '/reset' -> ('rq/resetRequest', 'rr/resetReply')."""
    base = dds_topic_name(service, "x")[2:]
    return f"rq/{base}Request", f"rr/{base}Reply"


def msg_class(ros_type: str, distro: str = "humble") -> type:
    """The rosbags dataclass of a message type."""
    return typestore(distro).types[normalize_type(ros_type)]


def serialize(msg: Any, ros_type: str, distro: str = "humble") -> bytes:
    """CDR bytes with the encapsulation header, padded to a multiple of 4 like DDS writers do."""
    try:
        data = bytes(typestore(distro).serialize_cdr(msg, normalize_type(ros_type)))
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as e:
        raise MessageError(f"message: does not fit {ros_type} ({type(e).__name__}: {e})") from None
    return data + b"\0" * (-len(data) % 4)


def deserialize(data: bytes | memoryview, ros_type: str, distro: str = "humble") -> Any:
    return typestore(distro).deserialize_cdr(bytes(data), normalize_type(ros_type))


# ------------------------------------------------------------------ cyclonedds types
def _idl_types() -> dict[str, Any]:
    from cyclonedds.idl import types as T

    return {"bool": bool, "byte": T.byte, "char": T.uint8, "int8": T.int8, "uint8": T.uint8,
            "int16": T.int16, "uint16": T.uint16, "int32": T.int32, "uint32": T.uint32,
            "int64": T.int64, "uint64": T.uint64, "float32": T.float32, "float64": T.float64}


def _field_type(desc: tuple, distro: str) -> Any:
    from cyclonedds.idl import types as T

    kind, detail = desc
    if kind == Nodetype.BASE:
        base, bound = detail
        if base in ("string", "wstring"):
            return T.bounded_str[bound] if bound else str
        return _idl_types()[base]
    if kind == Nodetype.NAME:
        return idl_struct(detail, distro=distro)
    if kind == Nodetype.ARRAY:
        return T.array[_field_type(detail[0], distro), detail[1]]
    if kind == Nodetype.SEQUENCE:
        sub, bound = detail
        return T.sequence[_field_type(sub, distro), bound] if bound else T.sequence[_field_type(sub, distro)]
    raise MessageError(f"type: unsupported field kind {kind!r}")


@functools.lru_cache(maxsize=None)
def idl_struct(ros_type: str, request_header: bool = False, distro: str = "humble") -> type:
    """A cyclonedds IdlStruct class built from rosbags' definition of ros_type in a
    distribution (recursive: nested messages, sequences, bounded and fixed arrays, strings).
    request_header: prefix the fields with rmw_cyclonedds' service header (uint64 client guid,
    int64 sequence)."""
    from cyclonedds.idl import make_idl_struct
    from cyclonedds.idl import types as T

    name = normalize_type(ros_type)
    _, fields = typestore(distro).fielddefs[name]
    members: dict[str, Any] = {"request_guid": T.uint64, "request_seq": T.int64} if request_header else {}
    members.update({fname: _field_type(desc, distro) for fname, desc in fields})
    suffix = ("_with_header" if request_header else "") + ("" if distro == "humble" else f"_{distro}")
    return make_idl_struct(name.replace("/", "_") + suffix, dds_type_name(name), members)


def to_idl(msg: Any, ros_type: str) -> Any:
    """A rosbags message -> an instance of idl_struct(ros_type) with the same values."""
    cls = idl_struct(ros_type)
    _, fields = typestore().fielddefs[normalize_type(ros_type)]
    values = {}
    for fname, (kind, detail) in fields:
        v = getattr(msg, fname)
        if kind == Nodetype.NAME:
            v = to_idl(v, detail)
        elif kind in (Nodetype.ARRAY, Nodetype.SEQUENCE):
            sub_kind, sub = detail[0]
            v = [to_idl(x, sub) for x in v] if sub_kind == Nodetype.NAME else np.asarray(v).tolist()
        values[fname] = v
    return cls(**values)


# ------------------------------------------------------------------ message constructors
def stamp(t: float | None = None) -> Any:
    """builtin_interfaces/msg/Time of wall-clock time t (default now)."""
    ns = time.time_ns() if t is None else int(round(t * 1e9))
    return msg_class("builtin_interfaces/msg/Time")(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def stamp_seconds(t: Any) -> float:
    return t.sec + t.nanosec * 1e-9


def header(frame_id: str = "", t: float | None = None) -> Any:
    return msg_class("std_msgs/msg/Header")(stamp=stamp(t), frame_id=frame_id)


def joint_state(names: Sequence[str], position: np.ndarray, velocity: np.ndarray | None = None,
                effort: np.ndarray | None = None, frame_id: str = "", t: float | None = None) -> Any:
    f = lambda x: np.asarray([] if x is None else x, np.float64).reshape(-1)  # noqa: E731
    return msg_class("sensor_msgs/msg/JointState")(header=header(frame_id, t), name=list(names),
                                                    position=f(position), velocity=f(velocity), effort=f(effort))


def image(rgb: np.ndarray, frame_id: str = "camera", t: float | None = None) -> Any:
    """uint8 [H, W, 3] -> sensor_msgs/msg/Image rgb8."""
    rgb = np.ascontiguousarray(rgb, np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise MessageError(f"image: expected uint8 [H, W, 3], got shape {rgb.shape}")
    h, w, _ = rgb.shape
    return msg_class("sensor_msgs/msg/Image")(header=header(frame_id, t), height=h, width=w, encoding="rgb8",
                                               is_bigendian=0, step=w * 3, data=rgb.reshape(-1))


def camera_info(width: int, height: int, fovy_deg: float, frame_id: str = "camera", t: float | None = None) -> Any:
    """sensor_msgs/msg/CameraInfo of an ideal pinhole camera (no distortion, square pixels) with
    vertical field of view fovy_deg, as MuJoCo renders: f = (H / 2) / tan(fovy / 2) pixels,
    principal point at the image centre in OpenCV pixel coordinates ((W - 1) / 2, (H - 1) / 2)."""
    if width < 1 or height < 1 or not 0.0 < fovy_deg < 180.0:
        raise MessageError(f"camera_info: need width, height >= 1 and 0 < fovy < 180, "
                           f"got {width}, {height}, {fovy_deg}")
    f = (height / 2.0) / np.tan(np.deg2rad(fovy_deg) / 2.0)
    cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
    k = np.array([f, 0.0, cx, 0.0, f, cy, 0.0, 0.0, 1.0])
    p = np.array([f, 0.0, cx, 0.0, 0.0, f, cy, 0.0, 0.0, 0.0, 1.0, 0.0])
    roi = msg_class("sensor_msgs/msg/RegionOfInterest")(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
    return msg_class("sensor_msgs/msg/CameraInfo")(
        header=header(frame_id, t), height=int(height), width=int(width), distortion_model="plumb_bob",
        d=np.zeros(5), k=k, r=np.eye(3).reshape(-1), p=p, binning_x=0, binning_y=0, roi=roi)


def float64_array(values: np.ndarray, labels: Sequence[str] = ()) -> Any:
    """std_msgs/msg/Float64MultiArray; a [K, A] array gets two layout dims (labels optional)."""
    v = np.asarray(values, np.float64)
    dim_cls = msg_class("std_msgs/msg/MultiArrayDimension")
    dims, stride = [], int(v.size)
    for i, n in enumerate(v.shape):
        dims.append(dim_cls(label=labels[i] if i < len(labels) else "", size=int(n), stride=stride))
        stride //= max(int(n), 1)
    layout = msg_class("std_msgs/msg/MultiArrayLayout")(dim=dims, data_offset=0)
    return msg_class("std_msgs/msg/Float64MultiArray")(layout=layout, data=v.reshape(-1))


def float64_array_values(msg: Any) -> np.ndarray:
    """Float64MultiArray -> float64 array shaped by its layout (flat when it has none)."""
    data = np.asarray(msg.data, np.float64)
    shape = [d.size for d in msg.layout.dim]
    if shape and int(np.prod(shape)) == data.size:
        return data.reshape(shape)
    return data


def joint_trajectory(names: Sequence[str], positions: np.ndarray, dt: float, frame_id: str = "") -> Any:
    """trajectory_msgs/msg/JointTrajectory with one point per row of positions [K, J], dt apart."""
    pts = np.atleast_2d(np.asarray(positions, np.float64))
    point_cls, dur_cls = msg_class("trajectory_msgs/msg/JointTrajectoryPoint"), msg_class("builtin_interfaces/msg/Duration")
    empty = np.zeros(0)
    points = []
    for k, row in enumerate(pts):
        ns = int(round((k + 1) * dt * 1e9))
        points.append(point_cls(positions=row, velocities=empty, accelerations=empty, effort=empty,
                                time_from_start=dur_cls(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)))
    return msg_class("trajectory_msgs/msg/JointTrajectory")(header=header(frame_id), joint_names=list(names),
                                                             points=points)


def scalar(ros_type: str, value: Any) -> Any:
    """std_msgs/msg/Bool, Int64, Float64, String, ... with `data=value`."""
    return msg_class(ros_type)(data=value)
