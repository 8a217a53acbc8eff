"""Backends: where the role objects live. The roles are plain classes; a backend only builds
them and calls their methods.

    local   the objects live in this process (the default; pdb steps into every role).
            A role built with threaded=True runs its calls on its own thread (env workers
            of a pipeline; the learner with max_staleness >= 1, so that its update overlaps
            the next collection: MuJoCo and torch release the GIL), otherwise calls run inline.
    ray     the same classes become Ray actors through a factory:
            ray.remote(cls).options(num_cpus=..., num_gpus=..., label_selector=...).

Both give futures: `backend.call(handle, "method", *args)` starts a call, `backend.get(f)`
(a future or a list of them) waits for the result.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable

from embodied.distributed.placement import Placement, PlacementError, RoleSpec, check_address, check_fits, local_resources


class LocalHandle:
    """A role object in this process, with an optional single thread for its calls. A threaded
    role is also built on that thread: state bound to a thread (an EGL context that rendering
    makes current) stays with the one thread that uses it."""

    def __init__(self, cls: type, args: tuple, kwargs: dict[str, Any], threaded: bool):
        self.pool = ThreadPoolExecutor(1, thread_name_prefix=cls.__name__) if threaded else None
        self.obj = self.pool.submit(cls, *args, **kwargs).result() if self.pool is not None else cls(*args, **kwargs)


class LocalBackend:
    name = "local"
    dead_errors: tuple[type[BaseException], ...] = ()  # a role cannot die alone in this process
    role_errors: tuple[type[BaseException], ...] = ()  # a role's exception propagates as itself

    def __init__(self, placement: Placement):
        if placement.learner.count > 1:
            raise PlacementError(f"placement.learner.count: {placement.learner.count} with backend local; allowed: 1 "
                                 f"(data-parallel learners run as processes: backend ray)")
        check_fits(placement, local_resources())
        self.handles: list[LocalHandle] = []

    def create(self, cls: type, spec: RoleSpec, *args: Any, threaded: bool = False, spread: bool = False,
               node: str | None = None, **kwargs: Any) -> LocalHandle:
        handle = LocalHandle(cls, args, kwargs, threaded)
        self.handles.append(handle)
        return handle

    def call(self, handle: LocalHandle, method: str, *args: Any) -> Future:
        fn = getattr(handle.obj, method)
        if handle.pool is not None:
            return handle.pool.submit(fn, *args)
        fut: Future = Future()
        fut.set_result(fn(*args))  # inline: an exception propagates here, with its traceback
        return fut

    def get(self, futures: Any) -> Any:
        if isinstance(futures, list):
            return [f.result() for f in futures]
        return futures.result()

    def kill(self, handle: LocalHandle) -> None:
        raise NotImplementedError("backend local: roles share this process; killing one would end the run")

    def dead(self, handles: list[LocalHandle], wait_s: float = 10.0) -> list[int]:
        return []  # in this process

    def wait_ready(self, future: Future, timeout_s: float) -> bool:
        wait([future], timeout=timeout_s)
        return future.done()

    def nodes(self) -> list[dict[str, Any]]:
        return [{"node": "local", "ip": "127.0.0.1", "labels": {}}]

    def shutdown(self) -> None:
        for h in self.handles:
            if h.pool is not None:
                h.pool.shutdown(wait=True)
        self.handles.clear()


class RayBackend:
    """Ray actors for the same classes. ray.init() here when placement.address is None (this
    machine, no dashboard), else joins the cluster at the address ("auto" or host:port)."""

    name = "ray"

    def __init__(self, placement: Placement, num_cpus: int | None = None):
        import ray

        check_address(placement.address)
        self.ray, self.started = ray, False
        self.dead_errors = (ray.exceptions.RayActorError,)  # the actor's process is gone
        # what a call can raise when a role died: its own death, or a rank of its process group failing with it
        self.role_errors = (ray.exceptions.RayActorError, ray.exceptions.RayTaskError)
        if not ray.is_initialized():
            if placement.address is None:  # Ray would start here: the placement must fit this machine
                check_fits(placement, local_resources())
            try:
                if placement.address is None:
                    # "local": a new Ray here, never one found through Ray's address file
                    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=placement.address, log_to_driver=False)
            except ConnectionError as e:
                raise PlacementError(f"placement.address: {placement.address!r}: {str(e).splitlines()[0]}") from None
            self.started = True
        nodes = [n for n in ray.nodes() if n["Alive"]]
        check_fits(placement, ray.cluster_resources(), [n.get("Labels", {}) for n in nodes])
        self.actors: list[Any] = []
        self.address = placement.address
        self.stopped = threading.Event()  # ends the head watch

    def watch_head(self, on_lost: Callable[[str], str], grace_s: float = 10.0, every_s: float = 1.0) -> None:
        """When this driver joined a cluster ("host:port"): a daemon thread connects to the head
        every every_s; once the head has not answered for grace_s, it prints on_lost(address),
        one line, to stderr and ends this process with status 2 (Ray itself would wait a minute
        for its GCS and end the driver with a stack of log lines)."""
        if self.address is None or self.address == "auto":
            return
        host, port = self.address.rsplit(":", 1)

        def watch() -> None:
            silent_since = None
            while not self.stopped.wait(every_s):
                try:
                    with socket.create_connection((host, int(port)), timeout=every_s):
                        silent_since = None
                except OSError:
                    silent_since = silent_since or time.monotonic()
                    if time.monotonic() - silent_since >= grace_s:
                        print(on_lost(self.address), file=sys.stderr, flush=True)
                        os._exit(2)

        threading.Thread(target=watch, name="head-watch", daemon=True).start()

    def create(self, cls: type, spec: RoleSpec, *args: Any, threaded: bool = False, spread: bool = False,
               node: str | None = None, **kwargs: Any) -> Any:
        """An actor of cls on a node with spec's labels and room for its CPUs / GPUs; spread: on
        the matching node with the fewest of this job's actors (Ray's SPREAD), node: on that
        node id (a role moved back to a host that returned)."""
        options: dict[str, Any] = {"num_cpus": spec.num_cpus, "num_gpus": spec.num_gpus, "max_restarts": 0}
        if spec.labels:
            options["label_selector"] = dict(spec.labels)
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        elif spread:
            options["scheduling_strategy"] = "SPREAD"
        actor = self.ray.remote(cls).options(**options).remote(*args, **kwargs)
        self.actors.append(actor)
        return actor

    def call(self, handle: Any, method: str, *args: Any) -> Any:
        return getattr(handle, method).remote(*args)

    def get(self, futures: Any) -> Any:
        return self.ray.get(futures)

    def kill(self, handle: Any) -> None:
        try:
            self.ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - gone with its host already
            pass
        self.actors = [a for a in self.actors if a is not handle]

    def dead(self, handles: list[Any], wait_s: float = 10.0) -> list[int]:
        """Indices of the actors whose process is gone: each is asked where it runs; one that
        does not answer within wait_s is busy (a rank blocked in its process group), not dead."""
        pings = [h.where.remote() for h in handles]
        ready, _ = self.ray.wait(pings, num_returns=len(pings), timeout=wait_s)
        out = []
        for i, ping in enumerate(pings):
            if ping in ready:
                try:
                    self.ray.get(ping)
                except self.dead_errors:
                    out.append(i)
        return out

    def wait_ready(self, future: Any, timeout_s: float) -> bool:
        """Whether the call finished within timeout_s (its result or error is then ready)."""
        ready, _ = self.ray.wait([future], timeout=timeout_s)
        return bool(ready)

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's alive nodes: [{"node": id, "ip": address, "labels": {...}}]."""
        return [{"node": n["NodeID"], "ip": n["NodeManagerAddress"], "labels": n.get("Labels", {})}
                for n in self.ray.nodes() if n["Alive"]]

    def shutdown(self) -> None:
        self.stopped.set()
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        self.actors.clear()
        if self.started:
            self.ray.shutdown()


def make_backend(name: str, placement: Placement) -> LocalBackend | RayBackend:
    """`local` (default) or `ray`; anything else is a one-line error."""
    if name == "local":
        return LocalBackend(placement)
    if name == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise PlacementError("backend: ray needs the distributed extra (pip install -c constraints.txt "
                                 "'.[distributed]')") from None
        return RayBackend(placement)
    raise PlacementError(f"backend: unknown backend {name!r}; allowed: local, ray")
