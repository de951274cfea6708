# sharedimg: an ExtStorage provider for herder's simulated clusters and tests.
# Each volume is a sparse image file "$EXTP_DIR/$VOL_NAME.img" in a directory every node
# shares; a node attaches it as a loop device. Sourced by the action scripts.
set -eu
DIR=${EXTP_DIR:-/srv/herder/sharedimg}
case "$VOL_NAME" in
  ""|*/*|.*) echo "sharedimg: invalid volume name '$VOL_NAME'" >&2; exit 1 ;;
esac
IMAGE="$DIR/$VOL_NAME.img"

# The loop devices this node has on the image, one per line.
attached_loops() {
  losetup -n -O NAME -j "$IMAGE" 2>/dev/null || true
}
