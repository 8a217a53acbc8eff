"""The actor-learner link: a local socket (multiprocessing.connection, pickled messages,
authenticated with a key kept in the run directory).

The actor listens; a learner connects (and reconnects after it restarts). Messages:
  learner -> actor   ("hello", {"episodes": K})            K episodes are loaded from disk already
                     ("weights", version, {name: array})   the actor's new weights
                     ("synced", (episode, step))           lockstep: every update due for the
                                                           transitions up to this one is done
  actor -> learner   ("transition", {...})                 one transition (embodied/robot_rl/replay.py)
                     ("episode", {...})                    an episode's summary
                     ("stop", reason)                      the run ended (e-stop, budget, error)
Tensors travel as numpy arrays (`to_wire`): torch's own pickling of a tensor shares its memory
through a file descriptor, which only works between a parent and its children.
The actor never blocks on the learner (except in lockstep, actor.lockstep): a receiver thread takes weights as they come, and a
sender thread drains a queue; a broken connection makes the actor "learner-less" until a
learner connects again. Transitions that could not be sent are kept on disk (the dataset)
and in memory for the learner's next hello."""

from __future__ import annotations

import logging
import os
import queue
import secrets
import threading
import time
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

log = logging.getLogger("embodied.robot_rl.link")


def _key(run_dir: Path) -> bytes:
    """The run's key: made once, by whichever of actor and learner comes first (os.link fails
    for the second, which then reads the first one's key)."""
    path = run_dir / "link.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".link.key.{os.getpid()}")
        tmp.write_bytes(secrets.token_bytes(32))
        os.chmod(tmp, 0o600)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        tmp.unlink()
    return path.read_bytes()


class ActorLink:
    """The actor's end. `weights()` gives the newest (version, state) received, or None."""

    def __init__(self, run_dir: str | Path, port: int = 0):
        self.run_dir = Path(run_dir)
        self.listener = Listener(("127.0.0.1", port), authkey=_key(self.run_dir))
        self.address = self.listener.address
        (self.run_dir / "actor.port").write_text(str(self.address[1]))
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._weights: tuple[int, dict] | None = None
        self.last_weights_time = time.monotonic()  # the learner's last weights or synced message
        self.synced: tuple[int, int] = (-1, -1)  # lockstep: the newest transition the learner is done with
        self.heard = threading.Event()  # set by every weights or synced message
        self.ever_connected = False
        self.hello = queue.Queue()  # episodes counts of learners that connected
        self.greeted = threading.Event()  # the current learner's hello has arrived
        self.listening = True
        self.out: queue.Queue = queue.Queue()
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="link-accept").start()
        threading.Thread(target=self._send, daemon=True, name="link-send").start()

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn = self.listener.accept()
            except Exception:  # closed listener, or a client that failed authentication
                if self.closed.is_set() or not self.listening:
                    return
                continue
            with self._lock:
                if self.closed.is_set() or not self.listening:  # the run ended meanwhile: EOF tells the learner
                    conn.close()
                    return
                old, self._conn = self._conn, conn
                self.ever_connected = True
                self.greeted.clear()
            if old is not None:
                old.close()
            log.info("link: learner connected")
            threading.Thread(target=self._receive, args=(conn,), daemon=True, name="link-recv").start()

    def _receive(self, conn: Connection) -> None:
        try:
            while True:
                msg = conn.recv()
                if msg[0] == "weights":
                    with self._lock:
                        self._weights = (msg[1], msg[2])
                        self.last_weights_time = time.monotonic()
                    self.heard.set()
                elif msg[0] == "synced":
                    with self._lock:
                        self.synced = max(self.synced, tuple(msg[1]))
                        self.last_weights_time = time.monotonic()
                    self.heard.set()
                elif msg[0] == "hello":
                    self.hello.put(msg[1]["episodes"])
                    with self._lock:
                        if self._conn is conn:
                            self.greeted.set()
        except (EOFError, OSError):
            pass
        self._drop(conn, "learner disconnected")

    def _drop(self, conn: Connection, why: str) -> None:
        with self._lock:
            if self._conn is conn:
                self._conn = None
                log.warning("link: %s; the actor goes on without it", why)
        conn.close()

    def _send(self) -> None:
        while not self.closed.is_set():
            try:
                msg = self.out.get(timeout=0.1)
            except queue.Empty:
                continue
            conn = self._conn
            if conn is None:
                continue  # the dataset and the actor's memory keep it for the next learner
            try:
                conn.send(msg)
            except (OSError, ValueError):
                self._drop(conn, "learner unreachable")

    def send(self, msg: tuple) -> None:
        if self._conn is not None:
            self.out.put(msg)

    def stop_listening(self, hello_timeout_s: float = 5.0) -> None:
        """Accept no new learner, and wait (at most hello_timeout_s) for the hello of one that
        has connected, so that the actor can answer it (re-send the episodes it lacks) before
        its stop: a learner that connects as the run ends must not miss them."""
        with self._lock:
            self.listening = False
        self.listener.close()
        if self._conn is not None:
            self.greeted.wait(hello_timeout_s)

    def weights(self) -> tuple[int, dict] | None:
        with self._lock:
            w, self._weights = self._weights, None
            return w

    def close(self) -> None:
        deadline = time.monotonic() + 10.0
        while not self.out.empty() and self._conn is not None and time.monotonic() < deadline:
            time.sleep(0.01)  # let the last messages (the stop) go out
        time.sleep(0.05)
        with self._lock:
            self.closed.set()
            conn, self._conn = self._conn, None
        if self.listening:
            self.listener.close()
        if conn is not None:
            conn.close()  # a learner reads EOF: the actor is gone


def to_wire(obj: Any) -> Any:
    """Tensors (also inside dicts) as numpy arrays, so that they pickle by value."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy()
    if isinstance(obj, dict):
        return {k: to_wire(v) for k, v in obj.items()}
    return obj


def connect_learner(run_dir: str | Path, timeout_s: float = 30.0) -> Connection:
    """The learner's end: connect to the actor of run_dir (waits for it to listen)."""
    run_dir = Path(run_dir)
    end = time.monotonic() + timeout_s
    while True:
        try:
            port = int((run_dir / "actor.port").read_text())
            return Client(("127.0.0.1", port), authkey=_key(run_dir))
        except (FileNotFoundError, ValueError, ConnectionRefusedError, OSError):
            if time.monotonic() > end:
                raise TimeoutError(f"learner: no actor listening for {run_dir} within {timeout_s:.0f} s") from None
            time.sleep(0.2)


def poll_all(conn: Connection, limit: int = 10_000) -> list[Any]:
    """Every message waiting on conn (at most limit), without blocking."""
    out = []
    while len(out) < limit and conn.poll():
        out.append(conn.recv())
    return out
