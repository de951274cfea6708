#!/usr/bin/env bash
# Best effort: make the real Ganeti 3.0.2 peers runnable (../shared/peers) so comparison tests
# run instead of skipping. Never fails the build: without ../shared or a network they skip.
here=$(cd "$(dirname "$0")/.." && pwd)
setup="$here/../shared/peers/setup.sh"
[ -f "$setup" ] || { echo "peers: ../shared/peers absent; peer comparison tests will skip"; exit 0; }
[ "$(id -u)" = 0 ] || { echo "peers: not root; peer comparison tests may skip"; exit 0; }
timeout 600 bash "$setup" >/tmp/herder-peers-setup.log 2>&1 \
  || { echo "peers: setup failed (see /tmp/herder-peers-setup.log); peer tests will skip"; exit 0; }
# Ganeti's virtual node (config, ssconf, HMAC key) that the confd/mond peers serve.
if [ ! -s /tmp/gpeers/node1.example.com/var/lib/ganeti/config.data ]; then
  mkdir -p /tmp/gpeers
  timeout 300 bash "$here/../shared/peers/mkcluster.sh" >/tmp/gpeers/mkcluster.log 2>&1 \
    || echo "peers: mkcluster failed (see /tmp/gpeers/mkcluster.log); some peer tests will skip"
fi
exit 0
