#!/usr/bin/env bash
# Join a machine to a running Ray head as a worker node (docs/distributed.md).
#   launch/ray_worker.sh HEAD_IP:PORT [NUM_CPUS] [LABELS]
# LABELS ("role=env", "role=env,site=lab") is what placement.<role>.labels selects: env
# workers with placement.env.labels {role: env} go to nodes started with "role=env".
# Stop with `ray stop`. Set RAY_IP to bind another address than the machine's default one.
set -euo pipefail
HEAD=${1:?usage: launch/ray_worker.sh HEAD_IP:PORT [NUM_CPUS] [LABELS]}
CPUS=${2:-}
LABELS=${3:-}
args=(--address "$HEAD" --disable-usage-stats)
[ -n "$CPUS" ] && args+=(--num-cpus "$CPUS")
[ -n "$LABELS" ] && args+=(--labels "$LABELS")
[ -n "${RAY_IP:-}" ] && args+=(--node-ip-address "$RAY_IP")
exec ray start "${args[@]}"
