"""Hosts on one Linux machine: network namespaces joined by veth pairs to a bridge, each running
a Ray node started by our launch scripts (launch/ray_head.sh, launch/ray_worker.sh), as
docs/distributed.md tells a user with several machines. Root only (`ip netns`).

    with NetnsCluster([Host("env", cpus=2, labels="role=env")]) as c:
        c.run_on_head([python, "-m", "embodied.cli", "train", ..., f"train.placement.address={c.address}"])
        c.cut("env0")     # the host's link goes down (netem loss 100% with c.netem(...))
        c.restore("env0"); c.restart("env0")

Layout: the head namespace holds the bridge (10.202.0.1/24, the head's address); worker i gets
a namespace with eth0 = 10.202.0.(11 + i), joined by a veth pair whose other end is a port of
the bridge. Nothing is added to the machine's own namespace, so no traffic leaves the
namespaces made here. Names are unique per cluster (a random prefix), every Ray process gets
a temp dir of its own host (RAY_TMPDIR), and `down()` (also on failure) kills every process in
the namespaces by pid, deletes the namespaces (their veths with them) and the temp dirs.
`ray stop` is not used: it stops every Ray process of the machine, other users' too.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "launch" / "ray_head.sh").exists())
SUBNET = "10.202.0"
# GCS health checks, so that a lost host is declared dead in seconds (Ray's default: about a minute)
FAST_FAILURE = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
                "RAY_health_check_failure_threshold": "4", "RAY_health_check_initial_delay_ms": "2000"}


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def usable() -> str | None:
    """None when namespaces can be made here (root, `ip` present); else why not."""
    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("ip") is None:
        return "network namespaces need Linux, root and iproute2"
    name = f"rp{secrets.token_hex(3)}"
    made = ip("netns", "add", name, check=False)
    if made.returncode:
        return f"network namespaces refused here: ip netns add failed: {made.stderr.strip()}"
    ip("netns", "del", name, check=False)
    return None


@dataclass
class Host:
    """A worker host: its Ray node's logical CPUs and labels ("role=env,site=a")."""

    name: str
    cpus: float = 1
    labels: str = ""


class NetnsCluster:
    def __init__(self, workers: list[Host], head_cpus: float = 1, head_labels: str = "role=learner",
                 port: int = 6379, env: dict[str, str] | None = None, python: str | None = None):
        self.tag = f"r{secrets.token_hex(3)}"  # namespace and veth names: at most 15 characters
        self.workers, self.head_cpus, self.head_labels, self.port = workers, head_cpus, head_labels, port
        self.head_ns = f"{self.tag}h"
        self.ns = {h.name: f"{self.tag}w{i}" for i, h in enumerate(workers)}
        self.ips = {h.name: f"{SUBNET}.{11 + i}" for i, h in enumerate(workers)}
        self.hub_end = {h.name: f"{self.tag}p{i}" for i, h in enumerate(workers)}  # the bridge's port
        self.head_ip = f"{SUBNET}.1"
        self.address = f"{self.head_ip}:{port}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
        python = python or sys.executable
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
        self.env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0",
                        PATH=f"{Path(python).parent}{os.pathsep}{self.env.get('PATH', '')}", **(env or {}))
        self.made: list[str] = []
        self.log = self.tmp / "launch.log"

    # --- the network ---------------------------------------------------------------------
    def _netns(self, name: str) -> None:
        ip("netns", "add", name)
        self.made.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def _network(self) -> None:
        self._netns(self.head_ns)
        ip("-n", self.head_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", self.head_ns, "addr", "add", f"{self.head_ip}/24", "dev", "br0")
        ip("-n", self.head_ns, "link", "set", "br0", "up")
        for i, h in enumerate(self.workers):
            ns, hub, far = self.ns[h.name], self.hub_end[h.name], f"{self.tag}q{i}"
            self._netns(ns)
            # made inside the head namespace, so no interface ever appears in the machine's own
            ip("-n", self.head_ns, "link", "add", hub, "type", "veth", "peer", "name", far, "netns", ns)
            ip("-n", self.head_ns, "link", "set", hub, "master", "br0", "up")
            ip("-n", ns, "link", "set", far, "name", "eth0")
            ip("-n", ns, "addr", "add", f"{self.ips[h.name]}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")

    # --- processes -----------------------------------------------------------------------
    def host_env(self, host: str) -> dict[str, str]:
        tmp = self.tmp / host
        tmp.mkdir(exist_ok=True)
        ip_ = self.head_ip if host == "head" else self.ips[host]
        return {**self.env, "RAY_TMPDIR": str(tmp), "RAY_IP": ip_}

    def namespace(self, host: str) -> str:
        return self.head_ns if host == "head" else self.ns[host]

    def popen(self, host: str, argv: list[str], **kw) -> subprocess.Popen:
        """argv in `host`'s namespace (cwd: the repository, the host's environment)."""
        env = {**self.host_env(host), **kw.pop("env", {})}
        return subprocess.Popen(["ip", "netns", "exec", self.namespace(host), *argv], cwd=kw.pop("cwd", ROOT),
                                env=env, **kw)

    def run(self, host: str, argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        env = {**self.host_env(host), **kw.pop("env", {})}
        return subprocess.run(["ip", "netns", "exec", self.namespace(host), *argv], cwd=kw.pop("cwd", ROOT),
                              env=env, timeout=timeout, capture_output=True, text=True, **kw)

    def _launch(self, host: str, argv: list[str]) -> float:
        t = time.perf_counter()
        out = self.run(host, argv, timeout=180)
        with open(self.log, "a") as f:
            f.write(f"$ {' '.join(argv)}  [{host}]\n{out.stdout}{out.stderr}\n")
        if out.returncode:
            raise RuntimeError(f"{' '.join(argv)} on {host} exited {out.returncode}: {out.stderr[-2000:]}")
        return time.perf_counter() - t

    def start_head(self) -> float:
        """launch/ray_head.sh PORT CPUS LABELS in the head namespace -> seconds it took."""
        return self._launch("head", ["launch/ray_head.sh", str(self.port), f"{self.head_cpus:g}",
                                     self.head_labels])

    def start_worker(self, name: str) -> float:
        """launch/ray_worker.sh HEAD_IP:PORT CPUS LABELS in the worker's namespace -> seconds."""
        h = next(w for w in self.workers if w.name == name)
        return self._launch(name, ["launch/ray_worker.sh", self.address, f"{h.cpus:g}", h.labels])

    def up(self) -> dict[str, float]:
        """The network, the head and every worker; -> start-up seconds per host."""
        self._network()
        times = {"head": self.start_head()}
        for h in self.workers:
            times[h.name] = self.start_worker(h.name)
        return times

    def pids(self, host: str) -> list[int]:
        out = ip("netns", "pids", self.namespace(host), check=False)
        return [int(p) for p in out.stdout.split()]

    def kill_all(self, host: str, grace: float = 2.0) -> None:
        """Every process in the host's namespace (Ray's and any driver), by pid: TERM, then KILL."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self.pids(host)
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.time() + grace
            while pids and time.time() < deadline and self.pids(host):
                time.sleep(0.1)

    def raylet_pid(self, host: str) -> int:
        for pid in self.pids(host):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "raylet":
                    return pid
            except OSError:
                pass
        raise RuntimeError(f"no raylet on {host}")

    # --- faults --------------------------------------------------------------------------
    def cut(self, name: str) -> None:
        """The worker's link goes down (its bridge port)."""
        ip("-n", self.head_ns, "link", "set", self.hub_end[name], "down")

    def restore(self, name: str) -> None:
        ip("-n", self.head_ns, "link", "set", self.hub_end[name], "up")

    def netem(self, name: str, spec: str | None) -> None:
        """tc netem on the worker's link ("loss 100%", "delay 5ms"); None removes it."""
        args = (["qdisc", "replace", "dev", "eth0", "root", "netem", *spec.split()] if spec
                else ["qdisc", "del", "dev", "eth0", "root"])
        subprocess.run(["ip", "netns", "exec", self.ns[name], "tc", *args], check=spec is not None,
                       capture_output=True)

    def restart(self, name: str) -> float:
        """The host comes back: what is left of its Ray node is killed, and launch/ray_worker.sh
        runs again (a node the head declared dead cannot rejoin as itself)."""
        self.kill_all(name)
        return self.start_worker(name)

    def kill_head(self) -> None:
        """The head's Ray processes (GCS, raylet, ...) end; a driver there lives on."""
        for pid in self.pids("head"):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() in ("gcs_server", "raylet"):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass

    def new_head(self) -> dict[str, float]:
        """A new head at the same address and every worker joined to it again (what is left of
        the old cluster ended first) -> start-up seconds per host."""
        for host in ["head", *self.ns]:
            self.kill_all(host)
        times = {"head": self.start_head()}
        for h in self.workers:
            times[h.name] = self.start_worker(h.name)
        return times

    # --- teardown ------------------------------------------------------------------------
    def down(self) -> None:
        """Every process, namespace (veths go with it) and temp dir made here; never raises."""
        for host in [*self.ns, "head"]:
            if self.namespace(host) in self.made:
                try:
                    self.kill_all(host)
                except Exception:  # noqa: BLE001 - teardown goes on
                    pass
        for name in self.made:
            ip("netns", "del", name, check=False)
        self.made.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "NetnsCluster":
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()
