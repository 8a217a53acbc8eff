"""The side-venv base's framing (sims/frames.py): arrays cross the process boundary as raw bytes
after a JSON header, whatever their dtype and nesting; a frame without arrays is the plain JSON
frame it always was."""

from __future__ import annotations

import io
import json
import struct

import numpy as np

from sims.frames import read_frame, write_frame


def test_arrays_travel_raw_and_plain_frames_are_unchanged():
    rng = np.random.default_rng(0)
    obj = {"op": "step", "actions": rng.standard_normal((3, 8, 4)), "limits": np.arange(3, dtype=np.int64),
           "res": {"success": rng.random((3, 8)) > 0.5, "frames": [rng.integers(0, 255, (2, 4, 4, 3), dtype=np.uint8)]},
           "n": np.int64(7), "render": True}
    buf = io.BytesIO()
    write_frame(buf, obj)
    raw = buf.getvalue()
    (n,) = struct.unpack(">I", raw[:4])
    header = json.loads(raw[4:4 + n])
    assert header["__bufs__"] == [3 * 8 * 4 * 8, 3 * 8, 3 * 8, 2 * 4 * 4 * 3] and len(raw) == 4 + n + sum(header["__bufs__"])
    back = read_frame(io.BytesIO(raw))
    assert back["op"] == "step" and back["n"] == 7 and back["render"] is True
    for got, want in ((back["actions"], obj["actions"]), (back["limits"], obj["limits"]),
                      (back["res"]["success"], obj["res"]["success"]), (back["res"]["frames"][0], obj["res"]["frames"][0])):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    back["actions"][0, 0, 0] = 1.0  # writable, as the worker's own arrays
    plain = io.BytesIO()
    write_frame(plain, {"op": "reset", "envs": [[0, 5]]})
    data = json.dumps({"op": "reset", "envs": [[0, 5]]}).encode()
    assert plain.getvalue() == struct.pack(">I", len(data)) + data
    assert read_frame(io.BytesIO(b"")) is None
