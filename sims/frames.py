"""Length-prefixed frames between a parent and a simulator worker in a side venv.

Standard library only (numpy when a frame carries arrays): a worker run by another interpreter
(sims/sidevenv/worker.py, sims/maniskill/mplib_worker.py) imports it too.

A frame is a 4-byte big-endian length, then that many bytes of UTF-8 JSON (the header). numpy
arrays anywhere in the object (dict values and list items, nested) do not go through JSON: the
header holds {"__nd__": i, "dtype": ..., "shape": [...]} in their place and "__bufs__": the byte
length of each, and their raw bytes follow the header, in order. A frame without arrays is plain
JSON, as before.
"""

from __future__ import annotations

import json
import signal
import struct
from typing import Any, BinaryIO


def _pull(obj: Any, bufs: list) -> Any:
    """obj with every numpy array replaced by its placeholder; the arrays appended to bufs."""
    if isinstance(obj, dict):
        return {k: _pull(v, bufs) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_pull(v, bufs) for v in obj]
    if type(obj).__module__ == "numpy" and hasattr(obj, "tobytes") and hasattr(obj, "shape"):
        if obj.shape == ():  # a numpy scalar: a number
            return obj.item()
        bufs.append(obj)
        return {"__nd__": len(bufs) - 1, "dtype": obj.dtype.str, "shape": list(obj.shape)}
    return obj


def _push(obj: Any, arrays: list) -> Any:
    if isinstance(obj, dict):
        if "__nd__" in obj:
            return arrays[obj["__nd__"]]
        return {k: _push(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_push(v, arrays) for v in obj]
    return obj


def read_frame(stream: BinaryIO) -> Any | None:
    """The next frame's object (its arrays as numpy arrays), or None at the end of the stream."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">I", head)
    obj = json.loads(stream.read(n).decode())
    if isinstance(obj, dict) and "__bufs__" in obj:
        import numpy as np

        sizes, specs = obj.pop("__bufs__"), obj.pop("__specs__")
        arrays = [np.frombuffer(bytearray(stream.read(size)), dtype=np.dtype(dt)).reshape(shape)
                  for size, (dt, shape) in zip(sizes, specs)]
        obj = _push(obj, arrays)
    return obj


def write_frame(stream: BinaryIO, obj: Any) -> None:
    bufs: list = []
    header = _pull(obj, bufs)
    if bufs:
        header["__bufs__"] = [b.nbytes for b in bufs]
        header["__specs__"] = [[b.dtype.str, list(b.shape)] for b in bufs]
    data = json.dumps(header).encode()
    stream.write(b"".join([struct.pack(">I", len(data)), data, *(b.tobytes() for b in bufs)]))
    stream.flush()


def leave_stop_to_parent() -> None:
    """Make this worker ignore SIGINT and SIGTERM. A Ctrl-C in a terminal (or a scheduler's
    SIGTERM to a process group) reaches the workers as well as the command that started them;
    the command stops after the step it is in, which needs its workers alive for that step,
    and then closes them. A worker whose parent is gone ends at the end of its input."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
