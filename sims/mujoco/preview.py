"""Render the first frame of tasks side by side from the front camera (docs/img/tasks.png).

    python -m sims.mujoco.preview docs/img/tasks.png [TASK ...]

Each task is reset with seed 0 and drawn at 128 x 128 (the envs' default render size).
"""

from __future__ import annotations

import sys

import numpy as np

DEFAULT_TASKS = ("Reach", "ReachColor", "PushCube", "PickCube", "PlaceCube")


def preview(tasks: tuple[str, ...] = DEFAULT_TASKS, seed: int = 0) -> np.ndarray:
    """uint8 [128, 128 * len(tasks), 3]: each task's first frame (front camera), left to right."""
    from sims.registry import make_env

    frames = []
    for task in tasks:
        env = make_env(task, 1, num_threads=1)
        env.reset(seed=seed)
        frames.append(env.render([0], camera="front")[0].numpy())
        env.close()
    return np.concatenate(frames, axis=1)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    from PIL import Image

    Image.fromarray(preview(tuple(argv[1:]) or DEFAULT_TASKS)).save(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
