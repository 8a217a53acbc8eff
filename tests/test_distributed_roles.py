"""Roles and backends: placement checks before anything starts; the same seeded training over
roles gives identical weights in one process (backend local) and as Ray actors (backend ray)."""

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from embodied.config import load_config
from embodied.distributed.backend import make_backend
from embodied.distributed.loop import free_port, train_roles
from embodied.distributed.placement import (PlacementError, check_address, check_fits, placement_from_dict,
                                            preset)

TINY = ["env.task=PushCube", "env.num_envs=8", "ppo.rollout_steps=8", "ppo.minibatches=2", "ppo.epochs=1",
        "policy.hidden_sizes=[32,32]", "train.torch_threads=1"]


def test_presets_and_overrides():
    p = placement_from_dict({"preset": "pipelined", "env": {"count": 4, "labels": {"role": "env"}}})
    assert (p.stages, p.env.count, p.env.labels, p.rollout.num_gpus) == (2, 4, {"role": "env"}, 0.0)
    g = preset("collocated", gpus=1)
    assert g.rollout.num_gpus == g.learner.num_gpus == 0.5 and g.stages == 1
    assert preset("disaggregated", gpus=2).learner.num_gpus == 1.0


@pytest.mark.parametrize("raw, field", [
    ({"preset": "hybrid"}, "placement.preset"),
    ({"envs": {}}, "placement.envs"),
    ({"env": {"count": 0}}, "placement.env.count"),
    ({"rollout": {"num_gpus": -1}}, "placement.rollout.num_gpus"),
    ({"learner": {"gpu": 1}}, "placement.learner.gpu"),
    ({"env": {"count": 3}, "stages": 2}, "placement.stages"),
])
def test_bad_placement_is_one_line(raw, field):
    with pytest.raises(PlacementError) as e:
        placement_from_dict(raw)
    assert str(e.value).startswith(field) and "\n" not in str(e.value)


def test_more_than_the_cluster_has():
    too_many = placement_from_dict({"env": {"count": 8, "num_cpus": 1}})
    with pytest.raises(PlacementError, match=r"asks for 9 CPUs .* has 2"):
        check_fits(too_many, {"CPU": 2.0, "GPU": 0.0})
    gpu = placement_from_dict({"rollout": {"num_gpus": 0.5}, "learner": {"num_gpus": 1}})
    with pytest.raises(PlacementError, match=r"asks for 1.5 GPUs"):
        check_fits(gpu, {"CPU": 16.0, "GPU": 1.0})
    labelled = placement_from_dict({"env": {"labels": {"role": "env"}}})
    with pytest.raises(PlacementError, match=r"placement.env.labels: no node has labels"):
        check_fits(labelled, {"CPU": 16.0}, [{"ray.io/node-id": "x"}])
    check_fits(labelled, {"CPU": 16.0}, [{}, {"role": "env"}])
    with pytest.raises(PlacementError, match="backend: unknown backend 'spark'"):
        make_backend("spark", preset("collocated"))


def test_unreachable_address_fails_before_start():
    with pytest.raises(PlacementError, match=r"placement.address: cannot reach the Ray head"):
        check_address(f"127.0.0.1:{free_port()}")
    with pytest.raises(PlacementError, match=r"placement.address: 'nohost'"):
        check_address("nohost")


def test_local_roles_are_deterministic_and_seeded(tmp_path):
    cfg = load_config(None, TINY)
    a = train_roles(cfg, preset("collocated", 2), "local", iterations=2, log_dir=tmp_path)
    b = train_roles(cfg, preset("collocated", 2), "local", iterations=2)
    c = train_roles(load_config(None, TINY + ["train.seed=1"]), preset("collocated", 2), "local", iterations=2)
    assert a["version"] == 2 and [h["weight_version"] for h in a["history"]] == [0, 1]
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
    assert not torch.equal(a["weights"]["actor.0.weight"], c["weights"]["actor.0.weight"])
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    for tag in ("time/inference_seconds", "time/env_wait_seconds", "time/update_seconds", "train/approx_kl"):
        assert [e.step for e in events.Scalars(tag)] == [64, 128], tag  # 8 envs x 8 steps per iteration


def test_one_version_stale_schedule():
    cfg = load_config(None, TINY)
    sync = train_roles(cfg, preset("collocated", 1), "local", iterations=3)
    stale = train_roles(cfg, preset("collocated", 1), "local", iterations=3, max_staleness=1)
    assert [h["staleness"] for h in sync["history"]] == [0, 0, 0]
    assert [h["staleness"] for h in stale["history"]] == [0, 1, 1]
    assert [h["weight_version"] for h in stale["history"]] == [0, 0, 1]
    assert stale["version"] == 3
    assert not torch.equal(sync["weights"]["actor.0.weight"], stale["weights"]["actor.0.weight"])
    with pytest.raises(PlacementError, match="max_staleness: 2; allowed: 0"):
        train_roles(cfg, preset("collocated", 1), "local", max_staleness=2)
