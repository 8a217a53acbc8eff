#!/usr/bin/env bash
# Start the Ray head of a cluster for embodied/distributed (docs/distributed.md).
#   launch/ray_head.sh [PORT] [NUM_CPUS] [LABELS]
# PORT defaults to 6379, NUM_CPUS to all of this machine's, LABELS (e.g. "role=learner") to
# none. Training then joins with placement.address: "HEAD_IP:PORT" (or "auto" on this machine).
# Stop with `ray stop`. Set RAY_IP to bind another address than the machine's default one.
set -euo pipefail
PORT=${1:-6379}
CPUS=${2:-}
LABELS=${3:-}
args=(--head --port "$PORT" --include-dashboard=false --disable-usage-stats)
[ -n "$CPUS" ] && args+=(--num-cpus "$CPUS")
[ -n "$LABELS" ] && args+=(--labels "$LABELS")
[ -n "${RAY_IP:-}" ] && args+=(--node-ip-address "$RAY_IP")
exec ray start "${args[@]}"
