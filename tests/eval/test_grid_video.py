"""The multi-task evaluation video: one tile per task, its instruction written on it
(embodied/eval/grid.py, embodied/eval/evaluate.py)."""

from __future__ import annotations

from types import SimpleNamespace

import av
import numpy as np
import torch

from embodied.eval.evaluate import evaluate
from embodied.eval.grid import grid
from sims.registry import expert_for, make_env


def test_grid_tiles_and_captions():
    frames = np.full((3, 64, 64, 3), 200, np.uint8)
    img = grid(frames, ["push the red cube onto the square", "reach", "a"])
    assert img.shape == (2 * 192, 2 * 192, 3)  # 2 columns, 2 rows, the empty cell black
    assert (img[192:, 192:] == 0).all()
    band = img[:20, :192]
    assert (band == 255).any() and (band < 100).any()  # white text on a darkened band
    assert (img[100:192, :192] == 200).all()  # the picture below the band is untouched


def test_multitask_eval_writes_a_captioned_grid(tmp_path):
    task = "multi:Reach+PushCube"
    env, ex = make_env(task, 4, obs_mode="rgb", cameras=("front",), image_size=(64, 64)), expert_for(task)

    class Expert:
        def act(self, obs, deterministic=True):
            return SimpleNamespace(actions=torch.from_numpy(ex(obs["privileged"].numpy()))[:, None])

    res = evaluate(Expert(), env, list(range(4)), video_path=tmp_path / "grid.mp4")
    assert res.per_task() == {"Reach": 1.0, "PushCube": 1.0} and res.as_dict()["success/PushCube"] == 1.0
    with av.open(str(res.video)) as c:
        first = next(c.decode(video=0)).to_ndarray(format="rgb24")
    assert first.shape == (192, 384, 3)  # one tile per task, not one per env
    assert (first[:16] > 200).any()  # the caption
