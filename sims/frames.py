"""Length-prefixed JSON frames between a parent and a simulator worker in a side venv.

Standard library only: a worker run by another interpreter (sims/metaworld/worker.py) imports it
too. A frame is a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
"""

from __future__ import annotations

import json
import signal
import struct
from typing import Any, BinaryIO


def read_frame(stream: BinaryIO) -> Any | None:
    """The next frame's object, or None at the end of the stream."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">I", head)
    return json.loads(stream.read(n).decode())


def write_frame(stream: BinaryIO, obj: Any) -> None:
    data = json.dumps(obj).encode()
    stream.write(struct.pack(">I", len(data)) + data)
    stream.flush()


def leave_stop_to_parent() -> None:
    """Make this worker ignore SIGINT and SIGTERM. A Ctrl-C in a terminal (or a scheduler's
    SIGTERM to a process group) reaches the workers as well as the command that started them;
    the command stops after the step it is in, which needs its workers alive for that step,
    and then closes them. A worker whose parent is gone ends at the end of its input."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
