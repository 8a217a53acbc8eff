"""Render the first frame of tasks side by side from the front camera (docs/img/tasks.png).

    python -m sims.mujoco.preview docs/img/tasks.png [TASK ...] [--reality PRESET]

Each task is reset with seed 0 and drawn at 128 x 128 (the envs' default render size). With
--reality, a second row shows the same episodes under the reality preset (docs/sim2real.md).
"""

from __future__ import annotations

import sys

import numpy as np

DEFAULT_TASKS = ("Reach", "ReachColor", "PushCube", "PickCube", "PlaceCube")


def preview(tasks: tuple[str, ...] = DEFAULT_TASKS, seed: int = 0, reality: str | None = None) -> np.ndarray:
    """uint8 [128, 128 * len(tasks), 3]: each task's first frame (front camera), left to right;
    with reality, [256, ...]: nominal above, the preset below."""
    from sims.registry import make_env

    rows = []
    for preset in (None, reality) if reality else (None,):
        frames = []
        for task in tasks:
            env = make_env(task, 1, num_threads=1, reality=preset)
            env.reset(seed=seed)
            frames.append(env.render([0], camera="front")[0].numpy())
            env.close()
        rows.append(np.concatenate(frames, axis=1))
    return np.concatenate(rows, axis=0)


def main(argv: list[str]) -> int:
    reality = None
    if "--reality" in argv:
        i = argv.index("--reality")
        if i + 1 >= len(argv):
            print("preview: --reality needs a preset name or path", file=sys.stderr)
            return 2
        reality, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    from PIL import Image

    Image.fromarray(preview(tuple(argv[1:]) or DEFAULT_TASKS, reality=reality)).save(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
