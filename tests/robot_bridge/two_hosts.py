"""Two hosts on one machine for the bridge's network tests: a robot host and a learner host
(network namespaces), joined by a point-to-point link whose faults the test sets.

The link is a TUN device in each namespace, with a thread of this process copying IP packets
between the two and applying the faults: loss (each packet, each direction, dropped with a
probability), delay (each packet held for a fixed time) and a cut (every packet dropped).
That is what `tc qdisc ... netem` does; it is done here in user space because this kernel
is built without netem (`CONFIG_NET_SCH_NETEM` is not set: `tc qdisc add ... netem` answers
"Specified qdisc kind is unknown"). Addresses (10.201.N.1 and .2) exist only inside the two
namespaces, so no traffic reaches any other address. `TwoHosts.down()` ends every process
started on the hosts and removes both namespaces, and with them the links.
"""

from __future__ import annotations

import ctypes
import fcntl
import heapq
import os
import random
import select
import shutil
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def unavailable() -> str | None:
    """Why two hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (ip netns, TUN devices)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    if not Path("/dev/net/tun").exists():
        return "needs /dev/net/tun"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


def _open_tun(netns: str, name: str) -> int:
    """A TUN device `name` inside netns, opened from a short-lived thread that enters the
    namespace (setns acts on the calling thread only; the caller's thread stays where it is)."""
    out: dict[str, Any] = {}

    def enter_and_open() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            ns = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(ns, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {netns}")
            finally:
                os.close(ns)
            fd = os.open("/dev/net/tun", os.O_RDWR)
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
            out["fd"] = fd
        except Exception as e:  # noqa: BLE001 (reported to the caller)
            out["error"] = e

    t = threading.Thread(target=enter_and_open)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["fd"]


class Link(threading.Thread):
    """Copies packets between two TUN fds; loss (probability), delay_s and cut apply to both
    directions, as netem on both ends of a veth pair. Counters in `sent`, `dropped`."""

    def __init__(self, fd_a: int, fd_b: int, seed: int = 0):
        super().__init__(daemon=True)
        self.fds = (fd_a, fd_b)
        self.loss, self.delay_s, self.cut = 0.0, 0.0, False
        self.rng = random.Random(seed)
        self.sent = self.dropped = 0
        self._queue: list[tuple[float, int, int, bytes]] = []  # (release time, order, out fd, packet)
        self._order = 0
        self._halt = threading.Event()

    def set(self, loss: float = 0.0, delay_s: float = 0.0, cut: bool = False) -> float:
        """Change the faults; returns the time.monotonic() they apply from."""
        self.loss, self.delay_s, self.cut = loss, delay_s, cut
        return time.monotonic()

    def run(self) -> None:
        a, b = self.fds
        while not self._halt.is_set():
            now = time.monotonic()
            while self._queue and self._queue[0][0] <= now:
                _, _, out, pkt = heapq.heappop(self._queue)
                self._write(out, pkt)
            wait = min(0.005, max(0.0, self._queue[0][0] - now)) if self._queue else 0.005
            ready, _, _ = select.select([a, b], [], [], wait)
            for fd in ready:
                try:
                    pkt = os.read(fd, 65536)
                except OSError:
                    continue
                out = b if fd == a else a
                if self.cut or (self.loss > 0 and self.rng.random() < self.loss):
                    self.dropped += 1
                elif self.delay_s > 0:
                    self._order += 1
                    heapq.heappush(self._queue, (time.monotonic() + self.delay_s, self._order, out, pkt))
                else:
                    self._write(out, pkt)

    def _write(self, fd: int, pkt: bytes) -> None:
        try:
            os.write(fd, pkt)
            self.sent += 1
        except OSError:  # the other end is down: the packet is lost, as on a wire
            self.dropped += 1

    def stop(self) -> None:
        self._halt.set()
        self.join(2)


class TwoHosts:
    """`robot` and `learner` namespaces (unique names per run) joined by a Link."""

    def __init__(self, directory: Path):
        tag = uuid.uuid4().hex[:6]
        self.dir = Path(directory)
        self.robot, self.learner = f"emb{tag}r", f"emb{tag}l"
        self.dev = {self.robot: f"tun{tag}r", self.learner: f"tun{tag}l"}
        n = random.randrange(256)
        self.addr = {self.robot: f"10.201.{n}.1", self.learner: f"10.201.{n}.2"}
        self.procs: list[subprocess.Popen] = []
        self.link: Link | None = None
        self._fds: list[int] = []
        self._made: list[str] = []

    def up(self) -> "TwoHosts":
        for ns in (self.robot, self.learner):
            _ip("netns", "add", ns)
            self._made.append(ns)
        for ns in (self.robot, self.learner):
            self._fds.append(_open_tun(ns, self.dev[ns]))
        for ns, peer in ((self.robot, self.learner), (self.learner, self.robot)):
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", self.addr[ns], "peer", f"{self.addr[peer]}/32", "dev", self.dev[ns])
            _ip("-n", ns, "link", "set", self.dev[ns], "up")
        self.link = Link(*self._fds)
        self.link.start()
        return self

    def set_down(self, ns: str, down: bool) -> float:
        """Take host ns's link interface down (a pulled cable) or up; returns the time.monotonic()
        it took effect. Up again, the kernel restores the peer route with the address."""
        _ip("-n", ns, "link", "set", self.dev[ns], "down" if down else "up")
        return time.monotonic()

    def dds_env(self, ns: str, domain_id: int) -> dict[str, str]:
        """The environment of a DDS process on host ns: Cyclone on the link's interface only,
        unicast discovery of both hosts' addresses (no multicast, no loopback-only setting)."""
        from robot_bridge.transport import network_config

        uri = network_config(self.dev[ns], [self.addr[self.robot], self.addr[self.learner]], self.dir / ns)
        return {**os.environ, "CYCLONEDDS_URI": uri, "ROS_DOMAIN_ID": str(domain_id)}

    def start(self, ns: str, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        """A process on host ns (`ip netns exec`), its output into log."""
        with open(log, "w") as f:
            p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], env=env, stdout=f, stderr=subprocess.STDOUT,
                                 cwd=Path(__file__).resolve().parents[2])
        self.procs.append(p)
        return p

    def down(self) -> list[str]:
        """End every process, stop the link, remove both namespaces (each step runs even when
        one before it failed); returns the namespaces still listed, which a test asserts empty."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        try:
            if self.link is not None:
                self.link.stop()
        finally:
            for fd in self._fds:
                os.close(fd)
            self._fds = []
            for ns in self._made:
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
                for pid in pids:  # a grandchild of a process this test started on that host
                    try:
                        os.kill(int(pid), 9)
                    except (ProcessLookupError, ValueError):
                        pass
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        return [ns for ns in self._made if ns in listed]
