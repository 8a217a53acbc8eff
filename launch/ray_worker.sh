#!/usr/bin/env bash
# Join a machine to a running Ray head as a worker node (docs/distributed.md, "Several hosts").
#   launch/ray_worker.sh HEAD_IP:PORT [NUM_CPUS] [LABELS] [-- MORE RAY START ARGS]
# LABELS ("role=env", "role=env,site=lab") is what placement.<role>.labels selects: env
# workers with placement.env.labels {role: env} go to nodes started with "role=env".
# RAY_IP: the address this node binds and announces (default: the one that reaches the head).
# RAY_TMPDIR: Ray's temp dir (default /tmp/ray).
# A host the head declared dead (its link was down longer than the health checks allow) cannot
# rejoin as itself: its raylet exits; run this script again to add it back.
# Stop with `ray stop` (it stops every Ray process of this machine).
set -euo pipefail
HEAD=${1:?usage: launch/ray_worker.sh HEAD_IP:PORT [NUM_CPUS] [LABELS] [-- MORE RAY START ARGS]}
CPUS=${2:-}
LABELS=${3:-}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
args=(--address "$HEAD" --disable-usage-stats)
[ -n "$CPUS" ] && args+=(--num-cpus "$CPUS")
[ -n "$LABELS" ] && args+=(--labels "$LABELS")
[ -n "${RAY_IP:-}" ] && args+=(--node-ip-address "$RAY_IP")
exec ray start "${args[@]}" "$@"
