"""DDS transport: ROS 2 naming, wire compatibility with rosbags' CDR, QoS, services, fallback."""

from __future__ import annotations

import builtins
import time

import numpy as np
import pytest

from robot_bridge import ros_types as rt
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS, TransportError
from robot_bridge.transport_factory import make_transport, rclpy_available


@pytest.fixture
def dds_pair(dds_env):
    a, b = make_transport("dds"), make_transport("dds")
    yield a, b
    a.close()
    b.close()


# rclpy imports only in the ROS 2 venvs: there these tests run on both transports
# (test_bridge_ros2.py::test_transport_tests_pass_on_rclpy runs them in .venv-ros-jazzy and -kilted)
@pytest.fixture(params=["dds", "rclpy"] if rclpy_available() else ["dds"])
def pair(request, dds_env):
    """Two nodes on one transport: the tests that use it hold for both transports."""
    a, b = make_transport(request.param, node_name="node_a"), make_transport(request.param, node_name="node_b")
    assert (a.name, b.name) == (request.param, request.param)
    yield a, b
    a.close()
    b.close()


def _until(pred, timeout: float = 5.0, every=None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if every is not None:
            every()
        if pred():
            return True
        time.sleep(0.01)
    return False


def test_ros2_names():
    assert rt.dds_topic_name("/joint_states") == "rt/joint_states"
    assert rt.dds_topic_name("/robot/cmd") == "rt/robot/cmd"
    assert rt.dds_type_name("sensor_msgs/msg/JointState") == "sensor_msgs::msg::dds_::JointState_"
    assert rt.dds_type_name("sensor_msgs/Image") == "sensor_msgs::msg::dds_::Image_"
    assert rt.dds_service_topics("/reset") == ("rq/resetRequest", "rr/resetReply")
    with pytest.raises(rt.MessageError, match="msg_type"):
        rt.normalize_type("sensor_msgs/msg/NoSuchThing")
    with pytest.raises(rt.MessageError, match="topic"):
        rt.dds_topic_name("/bad//name")


def _samples() -> dict[str, object]:
    img = np.random.default_rng(0).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    return {
        "sensor_msgs/msg/JointState": rt.joint_state(["x", "y", "finger_left"], [0.1, -0.2, 0.03],
                                                     [1.0, 2.0, 3.0], frame_id="base", t=12.5),
        "sensor_msgs/msg/Image": rt.image(img, t=3.25),
        "trajectory_msgs/msg/JointTrajectory": rt.joint_trajectory(["j1", "j2"], [[0.1, 0.2], [0.3, 0.4]], 0.05),
    }


def _same(a, b) -> bool:
    """Field-by-field equality of two rosbags messages (arrays compared exactly)."""
    if hasattr(a, "__dataclass_fields__"):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__ if f != "__msgtype__")
    if isinstance(a, (list, tuple)) and a and hasattr(a[0], "__dataclass_fields__"):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, list)):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


@pytest.mark.parametrize("msg_type", list(_samples()))
def test_cyclonedds_types_serialise_like_rosbags(msg_type):
    """The IdlStruct built from rosbags' definition gives byte-identical CDR."""
    msg = _samples()[msg_type]
    ours = rt.serialize(msg, msg_type)
    theirs = rt.to_idl(msg, msg_type).serialize()
    theirs += b"\0" * (-len(theirs) % 4)
    assert ours[:4] == b"\x00\x01\x00\x00"  # XCDR1 little endian
    assert ours == theirs
    assert rt.idl_struct(msg_type).__idl_typename__ == rt.dds_type_name(msg_type)


def test_wire_bytes_decode_with_rosbags(dds_pair):
    """Bytes captured off the wire by a raw reader decode with rosbags to the values sent."""
    a, b = dds_pair
    samples = _samples()
    got: dict[str, list[bytes]] = {k: [] for k in samples}
    pubs = {}
    for i, (msg_type, msg) in enumerate(samples.items()):
        topic = f"/wire{i}"
        b.subscribe_raw(topic, msg_type, got[msg_type].append, qos=COMMAND_QOS)
        pubs[msg_type] = a.publisher(topic, msg_type, COMMAND_QOS)

    def send():
        for t, p in pubs.items():
            if not got[t]:
                p.publish(samples[t])

    assert _until(lambda: all(got.values()), every=send)
    for msg_type, msg in samples.items():
        raw = got[msg_type][0]
        assert raw[:4] == b"\x00\x01\x00\x00"
        assert _same(msg, rt.typestore().deserialize_cdr(raw, msg_type))


def test_discovery_shows_ros2_names_and_qos(dds_pair):
    """What a remote participant discovers: rt/ topic, ROS type name, ROS 2 QoS profiles."""
    from cyclonedds.qos import Policy

    a, b = dds_pair
    a.publisher("/joint_states", "sensor_msgs/msg/JointState", SENSOR_QOS)
    a.publisher("/cmd_vel_like", "std_msgs/msg/Float64MultiArray", COMMAND_QOS)
    found = {}
    for topic, msg_type, qos in (("rt/joint_states", "sensor_msgs/msg/JointState", SENSOR_QOS),
                                 ("rt/cmd_vel_like", "std_msgs/msg/Float64MultiArray", COMMAND_QOS)):
        reader = b._reader(topic, msg_type, qos, lambda data: None)
        assert _until(lambda: bool(reader.get_matched_publications()))
        found[topic] = reader.get_matched_publication_data(reader.get_matched_publications()[0])
    js, cmd = found["rt/joint_states"], found["rt/cmd_vel_like"]
    assert (js.topic_name, js.type_name) == ("rt/joint_states", "sensor_msgs::msg::dds_::JointState_")
    assert cmd.type_name == "std_msgs::msg::dds_::Float64MultiArray_"
    assert js.qos[Policy.Reliability] == Policy.Reliability.BestEffort
    assert js.qos[Policy.History] == Policy.History.KeepLast(5)
    assert js.qos[Policy.Durability] == Policy.Durability.Volatile
    assert isinstance(cmd.qos[Policy.Reliability], Policy.Reliability.Reliable)
    assert cmd.qos[Policy.History] == Policy.History.KeepLast(10)


def test_foreign_writer_is_received(dds_pair):
    """A plain cyclonedds writer (serialising with cyclonedds itself, as another DDS/ROS 2 node
    would) on rt/cmd with the ROS type is decoded by our subscription."""
    from cyclonedds.pub import DataWriter
    from cyclonedds.topic import Topic

    from robot_bridge.dds import dds_qos

    a, b = dds_pair
    sub = b.subscribe("/cmd", "std_msgs/msg/Float64MultiArray", COMMAND_QOS)
    msg = rt.float64_array(np.array([[0.5, -0.25, 1.0, 0.0]]), labels=["k", "a"])
    topic = Topic(a.participant, "rt/cmd", rt.idl_struct("std_msgs/msg/Float64MultiArray"))
    writer = DataWriter(a.participant, topic, qos=dds_qos(COMMAND_QOS))
    assert _until(lambda: sub.latest() is not None, every=lambda: writer.write(rt.to_idl(msg, "std_msgs/msg/Float64MultiArray")))
    values = rt.float64_array_values(sub.latest().msg)
    assert values.shape == (1, 4) and values.tolist() == [[0.5, -0.25, 1.0, 0.0]]


def test_latest_with_receive_time_and_qos(pair):
    a, b = pair
    sub = b.subscribe("/js", "sensor_msgs/msg/JointState", SENSOR_QOS)
    pub = a.publisher("/js", "sensor_msgs/msg/JointState", SENSOR_QOS)
    assert _until(lambda: sub.latest() is not None, every=lambda: pub.publish(rt.joint_state(["x"], [0.0])))
    t0 = time.monotonic()
    seq = sub.latest().seq
    pub.publish(rt.joint_state(["x"], [7.0]))
    got = sub.wait_newer(seq, 2.0)
    while got is not None and got.msg.position.tolist() != [7.0]:  # [0.0]s still in flight (rclpy's executor)
        got = sub.wait_newer(got.seq, 2.0)
    assert got is not None and got.msg.position.tolist() == [7.0] and got.recv_time >= t0


def test_service_call(pair):
    a, b = pair
    calls = []

    def handler(req):
        calls.append(req)
        return rt.msg_class("std_srvs/srv/Trigger_Response")(success=True, message=f"reset {len(calls)}")

    b.serve("/reset_env", "std_srvs/srv/Trigger", handler)
    req = rt.msg_class("std_srvs/srv/Trigger_Request")(structure_needs_at_least_one_member=0)
    r1 = a.call_service("/reset_env", "std_srvs/srv/Trigger", req, timeout=5)
    r2 = a.call_service("/reset_env", "std_srvs/srv/Trigger", req, timeout=5)
    assert (r1.success, r1.message, r2.message) == (True, "reset 1", "reset 2")
    assert len(calls) == 2
    with pytest.raises(TransportError, match="not available"):
        a.call_service("/nobody", "std_srvs/srv/Trigger", req, timeout=0.3)


def test_slow_service_receives_one_request(dds_pair):
    """A call is sent once and waited for, as rmw_cyclonedds does (rclcpp and rclpy servers do
    not deduplicate): a 0.6 s handler sees one copy on the wire and runs once."""
    a, b = dds_pair
    calls, wire = [], []

    def handler(req):
        calls.append(req)
        time.sleep(0.6)
        return rt.msg_class("std_srvs/srv/Trigger_Response")(success=True, message="slow")

    b.serve("/slow", "std_srvs/srv/Trigger", handler)
    rq, _ = rt.dds_service_topics("/slow")
    b._reader(rq, "std_srvs/srv/Trigger_Request", COMMAND_QOS, wire.append)  # every copy that arrives
    req = rt.msg_class("std_srvs/srv/Trigger_Request")(structure_needs_at_least_one_member=0)
    assert a.call_service("/slow", "std_srvs/srv/Trigger", req, timeout=5).message == "slow"
    time.sleep(0.3)
    assert len(calls) == 1 and len(wire) == 1


def test_service_waits_for_the_clients_reply_reader(dds_pair):
    """A client (as a foreign node may) writes its request as soon as the service's request
    reader is matched, and creates its reply reader only afterwards: the server waits for that
    reader (up to 100 ms, as rmw_cyclonedds) instead of answering into the void."""
    from cyclonedds._clayer import ddspy_write
    from cyclonedds.pub import DataWriter
    from cyclonedds.topic import Topic

    from robot_bridge.dds import _REQ_HEADER, dds_qos

    a, b = dds_pair
    b.serve("/quick", "std_srvs/srv/Trigger",
            lambda req: rt.msg_class("std_srvs/srv/Trigger_Response")(success=True, message="quick"))
    rq, rr = rt.dds_service_topics("/quick")
    user = b"clientid=7.7.7;"  # rmw_cyclonedds' tag of one client's request writer and reply reader
    topic = Topic(a.participant, rq, rt.idl_struct("std_srvs/srv/Trigger_Request", True))
    writer = DataWriter(a.participant, topic, qos=dds_qos(COMMAND_QOS, user))
    assert _until(lambda: bool(writer.get_matched_subscriptions()))
    body = rt.serialize(rt.msg_class("std_srvs/srv/Trigger_Request")(structure_needs_at_least_one_member=0),
                        "std_srvs/srv/Trigger_Request")
    ddspy_write(writer._ref, body[:4] + _REQ_HEADER.pack(writer.instance_handle & (2**64 - 1), 1) + body[4:])
    replies = []
    time.sleep(0.02)  # the reply reader comes 20 ms after the request
    a._reader(rr, "std_srvs/srv/Trigger_Response", COMMAND_QOS, replies.append, user_data=user)
    assert _until(lambda: bool(replies), 2.0)
    guid, seq = _REQ_HEADER.unpack_from(replies[0], 4)
    assert (guid, seq) == (writer.instance_handle & (2**64 - 1), 1)
    reply = rt.deserialize(replies[0][:4] + replies[0][4 + _REQ_HEADER.size:], "std_srvs/srv/Trigger_Response")
    assert reply.message == "quick"


def test_closed_transport_sends_nothing(pair):
    a, b = pair
    pub = a.publisher("/x", "std_msgs/msg/Bool")
    a.close()
    with pytest.raises(TransportError, match="closed"):
        pub.publish(rt.scalar("std_msgs/msg/Bool", True))


def test_auto_falls_back_to_dds_without_rclpy(dds_env, monkeypatch):
    real_import = builtins.__import__

    def no_rclpy(name, *args, **kwargs):
        if name == "rclpy" or name.startswith("rclpy."):
            raise ImportError("No module named 'rclpy'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_rclpy)
    t = make_transport("auto")
    try:
        assert t.name == "dds"
    finally:
        t.close()
    with pytest.raises(TransportError, match="allowed: auto, dds, rclpy"):
        make_transport("zmq")
    with pytest.raises(TransportError, match="domain_id"):
        make_transport("dds", domain_id=999)


@pytest.mark.parametrize("distro,size", [("humble", 24), ("jazzy", 16), ("kilted", 16)])
def test_ros2_graph_shows_the_node(dds_env, monkeypatch, distro, size):
    """What `ros2 node list` reads (rmw_dds_common's graph): the participant's user data
    `enclave=/;`, and on ros_discovery_info the node's name with its readers' and writers' gids,
    in the gid layout of the distribution named by $ROS_DISTRO (Humble 24 bytes, later 16)."""
    from cyclonedds.qos import Policy

    from robot_bridge import ros_graph
    from robot_bridge.transport import QosProfile

    monkeypatch.setenv("ROS_DISTRO", distro)
    a, b = make_transport("dds", node_name="graph_node"), make_transport("dds")
    assert a.distro == distro
    pub = a.publisher("/chatter", "std_msgs/msg/String", COMMAND_QOS)
    infos: list[bytes] = []
    deep = QosProfile(reliable=True, depth=100, transient_local=True)  # keyless: depth 1 would keep one node's
    b._reader(ros_graph.DISCOVERY_TOPIC, ros_graph.DISCOVERY_TYPE, deep, infos.append, distro=distro)
    gid = lambda g: bytes(ros_graph.gid(g, distro).data)  # noqa: E731

    def announced():
        for raw in infos:
            msg = rt.deserialize(raw, ros_graph.DISCOVERY_TYPE, distro)
            if bytes(msg.gid.data) == gid(a.participant.guid):
                node = msg.node_entities_info_seq[0]
                if gid(pub._writer.guid) in [bytes(g.data) for g in node.writer_gid_seq]:
                    return node
        return None

    try:
        assert _until(lambda: announced() is not None)
        node = announced()
        assert (node.node_name, node.node_namespace) == ("graph_node", "/")
        assert len(gid(a.participant.guid)) == size
        assert gid(a.participant.guid)[:16] == a.participant.guid.bytes and gid(a.participant.guid)[16:] == bytes(size - 16)
        # The participant's user data (read locally: taking DCPSParticipant samples crashes this
        # cyclonedds-python build).
        assert a.participant.get_qos()[Policy.Userdata].data == b"enclave=/;"
    finally:
        b.close()
        a.close()


def test_unknown_ros_distro_is_one_line(dds_env, monkeypatch):
    monkeypatch.setenv("ROS_DISTRO", "noetic")
    with pytest.raises(TransportError, match="ROS_DISTRO: unknown ROS 2 distribution 'noetic'; allowed: humble, iron"):
        make_transport("dds")
    monkeypatch.delenv("ROS_DISTRO")
    t = make_transport("dds")
    assert t.distro == "jazzy"  # the documented default
    t.close()
