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
# Before masterd runs, changes go straight to the config file (--offline).
"$H" --offline group add rack2 --node-parameters spindle_count=2 >/dev/null
"$H" --offline node add node2.herder.example --ip 127.0.0.2 --secondary-ip 127.0.1.2 >/dev/null
"$H" --offline node modify node2.herder.example --master-candidate yes >/dev/null
"$H" --offline node add node3.herder.example --ip 127.0.0.3 --secondary-ip 127.0.1.3 \
  --group rack2 >/dev/null
"$H" --offline tags add cluster demo >/dev/null
echo
"$H" node list
echo
"$H" cluster verify
echo
"$H" cluster info

free_port() { "$HERE/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done' EXIT

# The master daemon: from here on, changes are jobs through its RAPI (Ganeti's RAPI v2).
echo
echo "== herder masterd: the job queue and Ganeti's RAPI v2 over HTTPS"
MPORT=$(free_port)
export HERDER_MASTERD="https://127.0.0.1:$MPORT"
"$H" masterd --bind 127.0.0.1 --port "$MPORT" --run-dir "$DIR/run" 2>"$DIR/masterd.log" &
PIDS+=($!)
for _ in $(seq 100); do "$H" job list >/dev/null 2>&1 && break; sleep 0.1; done
"$H" node modify node3.herder.example --drained yes
"$H" tags add node node2.herder.example rack:a1
"$H" node modify node1.herder.example --offline yes || echo "(refused, as it should be)"
"$H" job list

# The node monitoring agent on this machine, as node1 of the demo cluster.
echo
echo "== herder mond: the monitoring agent of node1, on this machine's real data"
PORT=$(free_port)
"$H" mond --bind 127.0.0.1 --port "$PORT" --node node1.herder.example --run-dir "$DIR/run" \
  --plugin-dir "$DIR/plugins" --diagnose-dir "$DIR/diagnose" 2>"$DIR/mond.log" &
PIDS+=($!)
for _ in $(seq 100); do
  "$H" mond list --url "http://127.0.0.1:$PORT" >/dev/null 2>&1 && break
  sleep 0.1
done
sleep 1
"$H" mond list --url "http://127.0.0.1:$PORT"
echo
echo "== herder mond status (one line per report; /1/report/all?verbose=1 has everything):"
"$H" mond status --url "http://127.0.0.1:$PORT"
echo
echo "Config: $HERDER_CONFIG (try: HERDER_CONFIG=$HERDER_CONFIG $H --help)"
echo "masterd ran at $HERDER_MASTERD/ and mond at http://127.0.0.1:$PORT/ (both stopped now;"
echo "run them yourself: $H masterd   and   $H mond)"
