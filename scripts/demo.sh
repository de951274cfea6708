#!/usr/bin/env bash
# `make run`: herder's main job on its embedded default — a whole cluster on this machine.
# `herder cluster simulate` brings up 3 nodes, each a Debian 12 machine booting systemd
# (systemd-nspawn from a debootstrapped root cached in /var/cache/herder-sim, built by the first
# run; herder installed from this checkout's wheel into /opt/herder by the install guide's
# script, its units enabled; Debian's libvirtd running real QEMU guests, TLS only between the
# nodes). node1 runs `herder cluster init`, the others are added with `herder node add`. This
# shell reaches the cluster as an operator's workstation does: through the published ports
# and the client profile simulate writes (no config file here).
# Then real guests (the herder-guest OS: a tiny Linux printing `herder-guest boot_id=..
# uptime=.. disk=<sha256 of its disk's first MiB>` every second) are placed by the allocator,
# live-migrated (the same boot goes on), failed over and evacuated through masterd's jobs,
# maintd heals a failing node and a crashed VM, a node that dies (its BMC cuts its power) is
# fenced and its guest started elsewhere, and the monitoring agents report. The cluster
# keeps running for you to drive; the last lines say how and how to stop it.
#
#   scripts/demo.sh [DIR]    DEMO_HOSTS=debian|namespace (default debian: the namespaced hosts
#                            are faster, and need no root filesystem), DEMO_FIRST_IP=N (default
#                            11: the cluster published on 127.0.0.N, node i's mond on N+i)
set -euo pipefail
DIR=${1:-/tmp/herder-demo}
HOSTS=${DEMO_HOSTS:-debian}
FIRST=${DEMO_FIRST_IP:-11}
CLUSTER_IP=127.0.0.$FIRST
mond_ip() { echo "127.0.0.$(( FIRST + $1 ))"; }  # node $1's mond
HERE=$(cd "$(dirname "$0")/.." && pwd)
H="$HERE/.venv/bin/herder"
unset HERDER_CONFIG HERDER_OFFLINE HERDER_MASTERD HERDER_RAPI_CA HERDER_RAPI_USER \
  HERDER_RAPI_PASSWORD_FILE
export HERDER_CLIENT="$DIR/client/client.toml"

echo "== herder cluster simulate: 3 nodes, each a host of its own ($HOSTS hosts)"
if [ "$HOSTS" = debian ]; then
  echo "   (the first run builds the Debian 12 root into /var/cache/herder-sim: ~7 minutes)"
fi
BEGAN=$(date +%s)
"$H" cluster simulate --nodes 3 --dir "$DIR" --hosts "$HOSTS" --first-ip "$FIRST"
echo "(the cluster came up in $(( $(date +%s) - BEGAN )) s)"

echo
echo "== the cluster as node1 sees it (herder cluster simulate --exec node1 -- ...)"
"$H" cluster simulate --dir "$DIR" --exec node1 -- herder cluster info | sed -n 1,8p  # all of it read: no SIGPIPE under pipefail

# the newest heartbeat of guest $1 on node $2 (its serial log on that node)
beat() {
  "$H" cluster simulate --dir "$DIR" --exec "$2" -- \
    sh -c "tail -n 1 /var/log/herder/instances/$1.serial.log 2>/dev/null" || true
}
primary() { "$H" instance list | awk -v i="$1" '$1 == i {print $4}'; }
wait_beat() {  # until guest $1 beats on node $2 (a TCG guest boots in ~10-30 s here)
  for _ in $(seq 90); do
    beat "$1" "$2" | grep -q herder-guest && break
    sleep 2
  done
  beat "$1" "$2"
}

echo
echo "== real guests placed by the allocator (the cluster's default iallocator: herder's own)"
"$H" instance add web1 --no-name-check -t sharedfile -o herder-guest --disk 1G --dry-run
"$H" instance add web1 --no-name-check -t sharedfile -o herder-guest --disk 1G
"$H" instance add db1 --no-name-check -t sharedfile -o herder-guest --disk 1G -n node1.sim.herder.test
"$H" instance add bad1 --no-name-check -t file -o debootstrap+nosuch --disk 1G || echo "(refused, as it should be)"
"$H" instance list
W1=$(primary web1)
echo "web1 boots on $W1; its serial console:"
wait_beat web1 "$W1"

echo
echo "== live migration of web1: libvirt moves the running guest over TLS, the heartbeat goes on"
echo "   (the same boot_id, a growing uptime)"
"$H" instance migrate web1
W1B=$(primary web1)
sleep 2
echo "web1 on $W1B now:"
beat web1 "$W1B"

echo
echo "== failover of db1 (clean shutdown on node1, started on node2): a new boot, the same disk"
wait_beat db1 node1
"$H" instance failover db1 --target-node node2.sim.herder.test
wait_beat db1 node2
"$H" instance list
"$H" node list

echo
echo "== maintd heals a node: node 2's self-diagnose starts reporting 'evacuate'; its running"
echo "   running guests move away live (db1's boot_id stays: the same boot, the same disk)"
echo "   (status page: http://$CLUSTER_IP:1816/status.html)"
beat db1 node2
"$H" cluster simulate --dir "$DIR" --break node2 evacuate
for _ in $(seq 60); do
  sleep 2
  if "$H" maintd status 2>/dev/null | grep -qE "completed|failed"; then
    break
  fi
done
"$H" maintd status
"$H" instance list
"$H" node list
D1=$(primary db1)
echo "db1 on $D1 now:"
beat db1 "$D1"

echo
echo "== instmon sees a VM crash (web1 destroyed behind herder's back); maintd starts it again"
"$H" cluster simulate --dir "$DIR" --crash web1
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
echo "== a node dies: node3's BMC (ipmi_sim) cuts its power, no grace: web1 dies with it. maintd"
echo "   sees node3's lease run out, asks the other master candidates, marks it offline, powers it"
echo "   off out of band (herder-oob-ipmi: ipmitool), confirms it with power-status, and only"
echo "   then starts web1 on another node (docs/ha.md \"Node failure\")"
N3=node3.sim.herder.test
boot_of() { beat "$1" "$2" | sed -n 's/.*boot_id=\([0-9a-f-]*\).*/\1/p'; }
wait_new_boot() {  # until guest $1 on node $2 shows a boot other than $3 (its log keeps old ones)
  for _ in $(seq 150); do
    b=$(boot_of "$1" "$2")
    [ -n "$b" ] && [ "$b" != "$3" ] && break
    sleep 2
  done
  beat "$1" "$2"
}
if [ "$(primary web1)" != "$N3" ]; then
  OLD=$(boot_of web1 "$N3")
  "$H" instance failover web1 --target-node "$N3"
  wait_new_boot web1 "$N3" "$OLD"
fi
declare -A BEFORE  # each node's newest boot of web1 before the failure
for n in node1 node2 node3; do BEFORE[$n.sim.herder.test]=$(boot_of web1 $n.sim.herder.test); done
"$H" node power status
"$H" cluster simulate --dir "$DIR" --power-off node3
START=$(date +%s)
for _ in $(seq 150); do
  sleep 1
  if "$H" maintd status 2>/dev/null \
      | awk '$3 == "node-failed" && ($4 == "completed" || $4 == "failed") {f=1} END {exit !f}'
  then
    break
  fi
done
"$H" maintd status | grep node-failed || true
W=$(primary web1)
wait_new_boot web1 "$W" "${BEFORE[$W]}"
echo "web1 heartbeats on $W, $(( $(date +%s) - START )) s after node3's power went off"
"$H" node power status

echo
echo "== the job queue (masterd, Ganeti's RAPI v2, published at https://$CLUSTER_IP:5080)"
"$H" job list

echo
echo "== the monitoring agent of node 2 (Ganeti's protocol v1, published at $(mond_ip 2):1815)"
sleep 1
"$H" mond status --node node2

echo
echo "The cluster keeps running. Drive it from a shell of this machine with:"
echo "  export HERDER_CLIENT=$HERDER_CLIENT"
echo "  unset HERDER_CONFIG HERDER_MASTERD HERDER_OFFLINE"
echo "  $H instance failover web1        # or: node evacuate, instance reboot, job list, ..."
echo "  $H tags remove node node2.sim.herder.test maintd:repairready:...   # then:"
echo "  $H cluster simulate --dir $DIR --break node2 Ok    # the incident is forgotten"
echo "  $H cluster simulate --dir $DIR --crash web1        # instmon -> maintd restarts it"
echo "  $H cluster simulate --dir $DIR --power-on node3    # back, offline; then:"
echo "  $H node modify node3.sim.herder.test --offline no"
if [ "$HOSTS" = debian ]; then
  echo "  $H cluster simulate --dir $DIR --exec node2 -- systemctl status 'herder-*'"
else
  echo "  $H cluster simulate --dir $DIR --exec node2 -- herder supervise status"
fi
echo "  curl -s http://$(mond_ip 1):1815/1/report/all | python3 -m json.tool   # node1's mond"
echo "Stop it with: $H cluster simulate --stop --dir $DIR"
