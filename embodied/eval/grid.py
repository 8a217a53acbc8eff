"""A grid of episode frames, one tile per task with its instruction written on it (OpenCV).

`embodied eval` on a multi-task checkpoint records one env per task (the first env of each task
label) and writes these grids as the video's frames, so a person sees every task at once and
reads what each tile was asked to do.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

TILE = 192  # px: a 64 px camera frame is scaled up (nearest) so that the text is legible
FONT = cv2.FONT_HERSHEY_SIMPLEX


def _wrap(text: str, width: int, scale: float) -> list[str]:
    """Split text into lines that fit `width` px at font `scale`."""
    lines, cur = [], ""
    for word in text.split():
        cand = f"{cur} {word}".strip()
        if cur and cv2.getTextSize(cand, FONT, scale, 1)[0][0] > width - 8:
            lines.append(cur)
            cur = word
        else:
            cur = cand
    return lines + ([cur] if cur else [])


def caption(tile: np.ndarray, text: str, scale: float = 0.42) -> np.ndarray:
    """uint8 [H, W, 3] tile -> a copy with `text` on a dark band at its top (wrapped)."""
    out = np.ascontiguousarray(tile.copy())
    lines = _wrap(text, out.shape[1], scale)
    line_h = cv2.getTextSize("Ag", FONT, scale, 1)[0][1] + 6
    band = min(len(lines) * line_h + 4, out.shape[0])
    out[:band] = (out[:band].astype(np.float32) * 0.35).astype(np.uint8)
    for k, line in enumerate(lines):
        cv2.putText(out, line, (4, (k + 1) * line_h), FONT, scale, (255, 255, 255), 1, cv2.LINE_AA)
    return out


def grid(frames: np.ndarray, captions: list[str], tile: int = TILE) -> np.ndarray:
    """frames uint8 [n, H, W, 3] and n captions -> one uint8 [rows * tile', cols * tile, 3] image:
    ceil(sqrt(n)) columns, each frame scaled to `tile` px wide (nearest), captioned; empty cells
    are black. H and W of the output are even (H.264's yuv420p needs it)."""
    n, h, w, _ = frames.shape
    th = int(round(tile * h / w)) // 2 * 2
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    out = np.zeros((rows * th, cols * tile, 3), np.uint8)
    for i in range(n):
        big = cv2.resize(np.ascontiguousarray(frames[i]), (tile, th), interpolation=cv2.INTER_NEAREST)
        r, c = divmod(i, cols)
        out[r * th:(r + 1) * th, c * tile:(c + 1) * tile] = caption(big, captions[i])
    return out
