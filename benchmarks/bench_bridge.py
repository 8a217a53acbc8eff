"""Bridge benchmarks over DDS on loopback (two processes each), not part of the tests.

  1. round trip observation -> action at 30 Hz: a robot process publishes a 128x128 rgb8
     sensor_msgs/Image and a sensor_msgs/JointState per tick; a policy process decodes both
     (numpy image), builds the observation and answers with a Float64MultiArray command
     (no policy compute: transport and (de)serialisation only). p50 / p99 / max of the time
     from publishing the joint state to receiving the command.
  2. sustained JointState rate: 1 kHz for 10 s (sensor QoS); received / sent, sequence gaps.
  3. (--episodes N) success rate of a Reach checkpoint served over DDS to the sim robot node
     against the same policy in simulation (trains a checkpoint first unless --checkpoint).

  python benchmarks/bench_bridge.py [--seconds 10] [--episodes 0] [--checkpoint RUN_DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from robot_bridge import ros_types as rt  # noqa: E402
from robot_bridge.camera import decode  # noqa: E402
from robot_bridge.transport import COMMAND_QOS, SENSOR_QOS, loopback_env  # noqa: E402
from robot_bridge.transport_factory import make_transport  # noqa: E402

JOINTS = ["x", "y", "z", "finger_left", "finger_right"]


def policy_process(ready, stop) -> None:
    """Answer each (image, joint state) pair with a command carrying the joint state's stamp."""
    tr = make_transport("dds", node_name="bench_policy")
    cmd = tr.publisher("/cmd", "std_msgs/msg/Float64MultiArray", COMMAND_QOS)
    img = tr.subscribe("/camera/image_raw", "sensor_msgs/msg/Image", SENSOR_QOS)
    wake = threading.Event()
    js = tr.subscribe("/joint_states", "sensor_msgs/msg/JointState", SENSOR_QOS, callback=lambda m: wake.set())
    ready.set()
    seen = 0
    while not stop.is_set():
        if not wake.wait(0.1):
            continue
        wake.clear()
        got = js.latest()
        if got is None or got.seq == seen:
            continue
        seen = got.seq
        im = img.latest()
        rgb = decode(im.msg) if im is not None else None  # the observation a policy gets
        state = np.concatenate([got.msg.position, got.msg.velocity]).astype(np.float32)
        _ = (rgb, state)
        cmd.publish(rt.float64_array([rt.stamp_seconds(got.msg.header.stamp), 0.0, 0.0, 0.0, 0.0]))
    tr.close()


def counter_process(ready, stop, out) -> None:
    tr = make_transport("dds", node_name="bench_counter")
    seqs: list[int] = []
    tr.subscribe("/joint_states_fast", "sensor_msgs/msg/JointState", SENSOR_QOS,
                 callback=lambda m: seqs.append(int(m.position[0])))
    ready.set()
    stop.wait()
    time.sleep(0.5)  # let the tail arrive
    out.put(seqs)
    tr.close()


def round_trip(seconds: float, hz: float = 30.0, size: int = 128) -> dict:
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=policy_process, args=(ready, stop))
    proc.start()
    ready.wait(30)
    tr = make_transport("dds", node_name="bench_robot")
    pub_js = tr.publisher("/joint_states", "sensor_msgs/msg/JointState", SENSOR_QOS)
    pub_img = tr.publisher("/camera/image_raw", "sensor_msgs/msg/Image", SENSOR_QOS)
    sent: dict[float, float] = {}
    lat: list[float] = []

    def on_cmd(msg) -> None:
        t0 = sent.pop(float(msg.data[0]), None)
        if t0 is not None:
            lat.append(time.perf_counter() - t0)

    tr.subscribe("/cmd", "std_msgs/msg/Float64MultiArray", COMMAND_QOS, callback=on_cmd)
    time.sleep(1.0)  # discovery
    rgb = np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8)
    warm = int(hz)  # the first second warms up both sides (lazy codec generation); not counted
    n = int(seconds * hz) + warm
    next_t = time.perf_counter()
    for k in range(n):
        if k == warm:
            lat.clear()
        stamp = 1000.0 + k / hz
        pub_img.publish(rt.image(rgb, t=stamp))
        sent[round(stamp, 9)] = time.perf_counter()
        pub_js.publish(rt.joint_state(JOINTS, np.full(5, 0.01 * k), np.zeros(5), t=stamp))
        next_t += 1.0 / hz
        time.sleep(max(0.0, next_t - time.perf_counter()))
    time.sleep(0.5)
    stop.set()
    proc.join(10)
    tr.close()
    ms = np.array(lat) * 1e3
    return {"ticks": n - warm, "answered": len(lat), "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()), "image": f"{size}x{size} rgb8"}


def sustained_rate(seconds: float, hz: float = 1000.0) -> dict:
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=counter_process, args=(ready, stop, out))
    proc.start()
    ready.wait(30)
    tr = make_transport("dds", node_name="bench_fast")
    pub = tr.publisher("/joint_states_fast", "sensor_msgs/msg/JointState", SENSOR_QOS)
    time.sleep(1.0)
    n = int(seconds * hz)
    t_start = next_t = time.perf_counter()
    for k in range(n):
        pub.publish(rt.joint_state(JOINTS, [float(k), 0, 0, 0, 0], np.zeros(5)))
        next_t += 1.0 / hz
        while time.perf_counter() < next_t:  # sleep() alone is too coarse at 1 kHz
            time.sleep(max(0.0, next_t - time.perf_counter() - 2e-4))
    elapsed = time.perf_counter() - t_start
    stop.set()
    seqs = out.get(timeout=30)
    proc.join(10)
    tr.close()
    missing = n - len(set(seqs))
    return {"sent": n, "received": len(seqs), "lost": missing, "achieved_hz": n / elapsed,
            "in_order": seqs == sorted(seqs)}


def success_comparison(episodes: int, checkpoint: str | None) -> dict:
    import subprocess
    import tempfile

    from embodied.run.checkpoint import resolve_checkpoint
    from embodied.config import load_config
    from embodied.eval.evaluate import evaluate
    from embodied.rl.train import train
    from embodied.run.env import eval_seeds
    from policies.base import Policy
    from sims.registry import make_env

    if checkpoint is None:
        checkpoint = tempfile.mkdtemp(prefix="bench_reach_")
        train(load_config(ROOT / "configs" / "ppo" / "ppo_reach.yaml", ["train.total_steps=60000", f"train.run_dir={checkpoint}",
                                                                 "train.progress=false", "train.eval_every=0",
                                                                 "train.video_episodes=0"]))
    ckpt = resolve_checkpoint(checkpoint)
    policy = Policy.from_pretrained(ckpt / "policy")
    policy.eval()
    direct = evaluate(policy, make_env("Reach", 1, num_threads=1), eval_seeds(episodes)).success_rate
    env = {**os.environ, "MUJOCO_GL": "egl"}
    sim = subprocess.Popen([sys.executable, "-m", "embodied.cli", "robot-sim", "Reach", "--transport", "dds",
                            "--image-size", "0", "--rate", "50"], env=env, cwd=ROOT)
    try:
        out = subprocess.run([sys.executable, "-m", "embodied.cli", "serve", str(ckpt), "--episodes", str(episodes),
                              "--rate", "50", "--transport", "dds"], env=env, cwd=ROOT, capture_output=True, text=True)
    finally:
        sim.terminate()
        sim.wait()
    served = json.loads(out.stdout[out.stdout.index("{"):])
    return {"episodes": episodes, "sim_success": direct, "served_success": served["success_rate"],
            "served_episode_length": served["episode_length"]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--episodes", type=int, default=0)
    p.add_argument("--checkpoint", default=None)
    args = p.parse_args()
    os.environ.update(loopback_env())
    report = {"machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
              "date": time.strftime("%Y-%m-%d %H:%M"), "python": platform.python_version()}
    report["round_trip_30hz"] = round_trip(args.seconds)
    report["joint_state_1khz"] = sustained_rate(args.seconds)
    if args.episodes:
        report["served_vs_sim"] = success_comparison(args.episodes, args.checkpoint)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
