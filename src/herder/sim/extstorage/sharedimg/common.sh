# sharedimg: an ExtStorage provider for herder's simulated clusters and tests.
# Each volume is a sparse image file "$EXTP_DIR/$VOL_NAME.img" in a directory every node
# shares; a node attaches it as a loop device of its own (as each host of a SAN has its own
# block device for a LUN), recorded in "$SHAREDIMG_RUN_DIR/$VOL_NAME.loop" (default
# /run/herder/sharedimg: private to each node). Sourced by the action scripts.
set -eu
DIR=${EXTP_DIR:-/srv/herder/sharedimg}
RUN=${SHAREDIMG_RUN_DIR:-/run/herder/sharedimg}
case "$VOL_NAME" in
  ""|*/*|.*) echo "sharedimg: invalid volume name '$VOL_NAME'" >&2; exit 1 ;;
esac
IMAGE="$DIR/$VOL_NAME.img"
RECORD="$RUN/$VOL_NAME.loop"

# Every loop device on the image (of any node), one per line.
attached_loops() {
  losetup -n -O NAME -j "$IMAGE" 2>/dev/null || true
}

# This node's loop device on the image, if it still is one.
own_loop() {
  [ -f "$RECORD" ] || return 0
  loop=$(cat "$RECORD")
  for found in $(attached_loops); do
    if [ "$found" = "$loop" ]; then echo "$loop"; return 0; fi
  done
}

# Detach this node's loop device (none: nothing to do).
detach_own() {
  loop=$(own_loop)
  [ -z "$loop" ] || losetup -d "$loop"
  rm -f "$RECORD"
}
