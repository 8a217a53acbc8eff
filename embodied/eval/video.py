"""mp4 writing with PyAV."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def video_rate(fps: float) -> Fraction:
    """The exact mp4 frame rate for `fps` (20, 12.5, 29.97, 30000/1001 ...); never rounded.

    ValueError when fps is no ratio with a denominator <= 1001 (the mp4 timebase could not
    hold it exactly)."""
    fps = float(fps)
    if not np.isfinite(fps) or fps <= 0:
        raise ValueError(f"fps: must be a positive number, got {fps}")
    rate = Fraction(fps).limit_denominator(1001)
    if abs(float(rate) - fps) > 1e-9 * fps:
        raise ValueError(f"fps: {fps} is not an exact frame rate (allowed: p/q with q <= 1001, e.g. 20, 12.5, 29.97)")
    return rate


def write_mp4(path: str | Path, frames: np.ndarray, fps: float = 20.0, crf: int | None = None) -> Path:
    """Encode uint8 [N, H, W, 3] frames as H.264 (yuv420p); written atomically.

    The stream's frame rate is exactly `fps` (12.5 and 29.97 stay themselves; frame k is
    presented at k / fps s); an fps no mp4 timebase holds exactly is a ValueError.

    crf: x264 quality (lower is better, 0 lossless in luma); with it, a keyframe
    every 2 frames for cheap random access (datasets). None: x264 defaults (videos).
    x264's macroblock-tree rate control is off: with it, the same frames encoded to
    different bytes from one call to the next, even on one thread, now and then with
    pixels that differ by up to 11 levels (2-10 of 400 videos when a collection ran twice),
    so a dataset, and the SFT trained on it, could not be rebuilt bit for bit.
    """
    rate = video_rate(fps)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = np.asarray(frames, dtype=np.uint8)
    n, h, w, _ = frames.shape
    pad_h, pad_w = h % 2, w % 2  # yuv420p needs even sizes
    if pad_h or pad_w:
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with av.open(str(tmp), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=rate)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.options = {"x264-params": "mbtree=0"}
        if crf is not None:
            stream.options = {**stream.options, "crf": str(crf), "g": "2"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    os.replace(tmp, path)
    return path
