"""Before the first step: does the robot give every observation the policy reads?

`embodied serve`, `sim2real --robot` and `finetune-robot` call `check_robot_gives(env, needs)`
right after RobotEnv subscribed and before the first reset. It waits for a first usable message
on the topic of each needed key, all topics at once, up to timeout_s (a robot still starting) and
START_TIMEOUT_S after the first of them arrived (a robot that is up):

  state        joint_states_topic (sensor_msgs/JointState with the configured joints)
  privileged   privileged_topic
  ee_pose      ee_pose_topic
  rgb_<cam>    image_topics[cam] (a frame that decodes and transforms)

and refuses in one EnvError line naming each missing key, its topic, and what the robot does
give: the keys that arrived and the image topics published on the ROS 2 graph (rclpy's graph, or
DDS discovery), so a camera published under another name shows up in the message.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from sims.vecenv import EnvError

IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
START_TIMEOUT_S = 5.0  # the least the commands wait for a first message (else the robot's reset_timeout_s)


class RobotMismatch(EnvError):
    """The robot does not give an observation the policy reads (bad input: exit status 2)."""


def subscriptions_by_key(env: Any) -> dict[str, Any]:
    """obs key -> the RobotEnv subscription that fills it (keys the config does not subscribe are absent)."""
    subs = {"state": env._js}
    if getattr(env, "_priv", None) is not None:
        subs["privileged"] = env._priv
    if getattr(env, "_pose", None) is not None:
        subs["ee_pose"] = env._pose
    for cam, sub in getattr(env, "_images", {}).items():
        subs[f"rgb_{cam}"] = sub
    return subs


def published_topics(transport: Any) -> dict[str, set[str]] | None:
    """ROS topic -> its ROS types, of the topics someone publishes, as far as this participant has
    discovered the graph; None when the transport cannot say. DDS names map back to ROS ones (rt/x -> /x, pkg::msg::dds_::Name_ ->
    pkg/msg/Name)."""
    node = getattr(transport, "node", None)
    if node is not None:  # rclpy
        try:  # the graph's topics, ours included: those with a publisher
            return {name: set(types) for name, types in node.get_topic_names_and_types()
                    if node.count_publishers(name) > 0}
        except Exception:  # noqa: BLE001 (a closed node)
            return None
    participant = getattr(transport, "participant", None)
    if participant is None:
        return None
    try:
        from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsPublication

        reader = BuiltinDataReader(participant, BuiltinTopicDcpsPublication)
        samples, end = [], time.monotonic() + 1.0  # a new reader gets what was discovered so far, not at once
        while time.monotonic() < end:
            got = reader.take(N=4096)
            if samples and not got:
                break
            samples += got
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 (discovery data is a courtesy in an error message)
        return None
    topics: dict[str, set[str]] = {}
    for s in samples:
        name, typ = getattr(s, "topic_name", ""), getattr(s, "type_name", "")
        if not name.startswith("rt/"):
            continue
        topics.setdefault("/" + name[3:], set()).add(typ.replace("::dds_::", "::").replace("::", "/").rstrip("_"))
    return topics


def check_robot_gives(env: Any, needs: Iterable[str], timeout_s: float = 5.0, who: str = "the policy") -> None:
    """RobotMismatch (an EnvError, one line) unless every key in `needs` got a usable message within
    timeout_s, or within START_TIMEOUT_S of the first needed message (a robot that is up gives
    its other topics by then; one still starting has timeout_s).

    env: a RobotEnv, subscribed and not yet reset. needs: obs keys such as state, rgb_front."""
    needs = list(dict.fromkeys(needs))
    subs = subscriptions_by_key(env)
    topic = {k: s.topic for k, s in subs.items()}
    waiting = [subs[k] for k in needs if k in subs]
    t0 = time.monotonic()
    end, first = t0 + timeout_s, None
    while time.monotonic() < end and len(waiting) == len(needs):
        have = [s.latest() is not None for s in waiting]
        if all(have):
            break
        if any(have) and first is None:
            first = time.monotonic()
            end = min(end, first + START_TIMEOUT_S)
        time.sleep(0.02)
    got = [k for k, s in subs.items() if s.latest() is not None]
    missing = [k for k in needs if k not in got]
    if not missing:
        return
    why, waited = [], time.monotonic() - t0
    for k in missing:
        sub = subs.get(k)
        if sub is None:
            why.append(f"{k} (the robot config subscribes no topic for it)")
        elif sub.rejected:
            why.append(f"{k} ({sub.topic}: {sub.rejected} messages unusable, the last because: {sub.last_rejection})")
        else:
            why.append(f"{k} (nothing on {sub.topic} in {waited:.0f} s)")
    gives = ", ".join(f"{k} ({topic[k]})" for k in got) or "nothing"
    graph = published_topics(getattr(env, "tr", None))
    images = sorted(t for t, types in (graph or {}).items() if types & set(IMAGE_TYPES))
    seen = f"; image topics on the graph: {', '.join(images) or 'none'}" if graph is not None else ""
    raise RobotMismatch(f"robot: {who} needs {', '.join(missing)}, which the robot does not give: {'; '.join(why)}. "
                   f"It gives {gives}{seen}")
