#!/usr/bin/env bash
# Start the Ray head of a cluster for embodied/distributed (docs/distributed.md, "Several hosts").
#   launch/ray_head.sh [PORT] [NUM_CPUS] [LABELS] [-- MORE RAY START ARGS]
# PORT defaults to 6379, NUM_CPUS to all of this machine's, LABELS (e.g. "role=learner") to
# none ("" to skip it when more arguments follow). Training then joins with
# placement.address: "HEAD_IP:PORT" (or "auto" on this machine).
# RAY_IP: the address the head binds and announces (a machine with several interfaces must set
# it to the one the other hosts reach). RAY_TMPDIR: Ray's temp dir (default /tmp/ray).
# The RAY_health_check_* variables set here decide how soon a lost host is declared dead
# (Ray's default: about a minute; docs/distributed.md).
# Stop with `ray stop` (it stops every Ray process of this machine).
set -euo pipefail
PORT=${1:-6379}
CPUS=${2:-}
LABELS=${3:-}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
args=(--head --port "$PORT" --include-dashboard=false --disable-usage-stats)
[ -n "$CPUS" ] && args+=(--num-cpus "$CPUS")
[ -n "$LABELS" ] && args+=(--labels "$LABELS")
[ -n "${RAY_IP:-}" ] && args+=(--node-ip-address "$RAY_IP")
exec ray start "${args[@]}" "$@"
