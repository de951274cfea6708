#!/usr/bin/env bash
# `make run`: herder's main job on its embedded default. For now: initialise a fresh demo
# cluster config (with its secrets) in DIR, add a few nodes and a group, check it, and print
# its info. Later components grow this into a running cluster.
set -euo pipefail
DIR=${1:-/tmp/herder-demo}
HERE=$(cd "$(dirname "$0")/.." && pwd)
H="$HERE/.venv/bin/herder"
rm -rf "$DIR"
mkdir -p "$DIR"
export HERDER_CONFIG="$DIR/config.json"
"$H" cluster init demo.herder.example --master-node node1.herder.example \
  --primary-ip 127.0.0.1 --secondary-ip 127.0.1.1 --uid-pool 2000-2099 \
  --default-iallocator herder
"$H" group add rack2 --node-parameters spindle_count=2 >/dev/null
"$H" node add node2.herder.example --ip 127.0.0.2 --secondary-ip 127.0.1.2 \
  --master-candidate >/dev/null
"$H" node add node3.herder.example --ip 127.0.0.3 --secondary-ip 127.0.1.3 \
  --group rack2 >/dev/null
"$H" tags add cluster demo >/dev/null
echo
"$H" node list
echo
"$H" cluster verify
echo
"$H" cluster info
echo
echo "Config: $HERDER_CONFIG (try: HERDER_CONFIG=$HERDER_CONFIG $H --help)"
