"""A real multi-node Ray run on this machine: a head and a second node labelled role=env
(ray.cluster_utils.Cluster), everything on 127.0.0.1. The env workers are placed on the
labelled node by placement.env.labels, a short training run spans both nodes, and its weights
equal backend local's. Torn down at the end."""

import os

import pytest
import torch

from embodied.config import load_config
from embodied.distributed.loop import train_roles
from embodied.distributed.placement import placement_from_dict

pytestmark = pytest.mark.ray
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray's import: Ray on 127.0.0.1 only
ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

TINY = ["env.task=PushCube", "env.num_envs=8", "ppo.rollout_steps=8", "ppo.minibatches=2", "ppo.epochs=1",
        "policy.hidden_sizes=[32,32]", "train.torch_threads=1"]


@pytest.mark.scale  # about 1 min: `make bench-scale`; the suite places env workers on namespace hosts (test_distributed_hosts.py)
def test_env_workers_on_the_labelled_node():
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    try:
        env_node = cluster.add_node(num_cpus=1, labels={"role": "env"}, node_ip_address="127.0.0.1")
        assert cluster.address.startswith("127.0.0.1:")
        place = placement_from_dict({"preset": "disaggregated", "address": cluster.address,
                                     "env": {"count": 2, "num_cpus": 0.5, "labels": {"role": "env"}}})
        cfg = load_config(None, TINY)
        remote = train_roles(cfg, place, "ray", iterations=2)
        assert {w["node"] for w in remote["where"]["env"]} == {env_node.node_id}
        assert remote["where"]["learner"][0]["node"] == cluster.head_node.node_id  # the other node
        local = train_roles(cfg, placement_from_dict({"preset": "disaggregated"}), "local", iterations=2)
        for k, v in local["weights"].items():
            assert torch.equal(v, remote["weights"][k]), k
    finally:
        ray.shutdown()
        cluster.shutdown()
