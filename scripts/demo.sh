#!/usr/bin/env bash
# `make run`: herder's main job on its embedded default — a whole cluster on this machine.
# `herder cluster simulate` brings up 3 nodes, each a host of its own (its own processes,
# network, mounts and libvirtd serving libvirt's test driver), whose supervisor runs herder's
# daemons with a real host's defaults; node1 runs `herder cluster init`, the others are added
# with `herder node add`. This shell reaches the cluster as an operator's workstation does:
# through the published ports and the client profile simulate writes (no config file here).
# Then instances are placed by the allocator, moved and evacuated through masterd's jobs,
# maintd heals a failing node and a crashed VM, and the monitoring agents report. The cluster
# keeps running for you to drive; the last lines say how and how to stop it.
set -euo pipefail
DIR=${1:-/tmp/herder-demo}
HERE=$(cd "$(dirname "$0")/.." && pwd)
H="$HERE/.venv/bin/herder"
unset HERDER_CONFIG HERDER_OFFLINE HERDER_MASTERD HERDER_RAPI_CA HERDER_RAPI_USER \
  HERDER_RAPI_PASSWORD_FILE
export HERDER_CLIENT="$DIR/client/client.toml"

echo "== herder cluster simulate: 3 nodes, each a host of its own"
"$H" cluster simulate --nodes 3 --dir "$DIR"

echo
echo "== the cluster as node1 sees it (herder cluster simulate --exec node1 -- ...)"
"$H" cluster simulate --dir "$DIR" --exec node1 -- herder cluster info | sed -n 1,8p  # all of it read: no SIGPIPE under pipefail

echo
echo "== instances placed by the allocator (the cluster's default iallocator: herder's own)"
"$H" instance add web1 --no-name-check -t sharedfile -o debootstrap+default --disk 1G --dry-run
"$H" instance add web1 --no-name-check -t sharedfile -o debootstrap+default --disk 1G
"$H" instance add web2 --no-name-check -t sharedfile -o debootstrap+minimal --disk 2G -B maxmem=256
"$H" instance add db1 --no-name-check -t file -o debootstrap+default --disk 1G -n node1.sim.herder.test
"$H" instance add bad1 --no-name-check -t file -o debootstrap+nosuch --disk 1G || echo "(refused, as it should be)"
"$H" instance list

echo
echo "== live migration, then evacuating node 2 (primaries and secondaries move)"
"$H" instance migrate web1
"$H" node evacuate node2.sim.herder.test
"$H" instance list
"$H" node list

echo
echo "== maintd heals a node: node 3's self-diagnose starts reporting 'evacuate'"
echo "   (status page: http://127.0.0.11:1816/status.html)"
"$H" cluster simulate --dir "$DIR" --break node3 evacuate
for _ in $(seq 60); do
  sleep 2
  if "$H" maintd status 2>/dev/null | grep -qE "completed|failed"; then
    break
  fi
done
"$H" maintd status
"$H" instance list
"$H" node list

echo
echo "== instmon sees a VM crash (web2 destroyed behind herder's back); maintd starts it again"
"$H" cluster simulate --dir "$DIR" --crash web2
for _ in $(seq 30); do
  sleep 1
  if "$H" maintd status 2>/dev/null | grep -E "restart|relocate" | grep -qE "completed|failed"
  then
    break
  fi
done
"$H" maintd status | grep -E "restart|relocate" || true
"$H" instance list

echo
echo "== the job queue (masterd, Ganeti's RAPI v2, published at https://127.0.0.11:5080)"
"$H" job list

echo
echo "== the monitoring agent of node 2 (Ganeti's protocol v1, published at 127.0.0.13:1815)"
sleep 1
"$H" mond status --node node2

echo
echo "The cluster keeps running. Drive it from a shell of this machine with:"
echo "  export HERDER_CLIENT=$HERDER_CLIENT"
echo "  unset HERDER_CONFIG HERDER_MASTERD HERDER_OFFLINE"
echo "  $H instance failover web1        # or: node evacuate, instance reboot, job list, ..."
echo "  $H tags remove node node3.sim.herder.test maintd:repairready:...   # then:"
echo "  $H cluster simulate --dir $DIR --break node3 Ok    # the incident is forgotten"
echo "  $H cluster simulate --dir $DIR --crash web1        # instmon -> maintd restarts it"
echo "  $H cluster simulate --dir $DIR --exec node2 -- herder supervise status"
echo "  curl -s http://127.0.0.12:1815/1/report/all | python3 -m json.tool   # node1's mond"
echo "Stop it with: $H cluster simulate --stop --dir $DIR"
