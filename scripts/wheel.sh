#!/usr/bin/env bash
# Build herder's wheel into OUTDIR without writing into the checkout (docs/install.md
# "1. Build the wheel"); prints the wheel's path.
#
#   scripts/wheel.sh OUTDIR [PYTHON]
#
# setuptools writes build/ and src/herder.egg-info into the tree it builds, so the tree's
# files (tracked and untracked-but-not-ignored, as they are now) are copied to a temporary
# directory and built there. The version comes from this checkout's git (setuptools-scm: last
# tag, distance, commit, a dirty mark) and is handed to the copy, which has no git metadata;
# SETUPTOOLS_SCM_PRETEND_VERSION set by the caller wins (two builds of one tree side by side).
# PYTHON (default: .venv/bin/python, else python3) needs setuptools and setuptools-scm at
# pyproject.toml's pins (the dev extras have them): the build runs offline, without isolation.
set -euo pipefail
out=${1:?usage: scripts/wheel.sh OUTDIR [PYTHON]}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${2:-}
if [ -z "$python" ]; then
    if [ -x "$here/.venv/bin/python" ]; then python=$here/.venv/bin/python; else python=python3; fi
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/herder-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$here"
if [ -z "${SETUPTOOLS_SCM_PRETEND_VERSION:-}" ]; then
    SETUPTOOLS_SCM_PRETEND_VERSION=$("$python" -m setuptools_scm)
fi
export SETUPTOOLS_SCM_PRETEND_VERSION
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard -- pyproject.toml README.md src \
        | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
        | (cd "$here" && cpio -0 -pdm --quiet "$work/tree")
else  # an unpacked source tree: its files as they are, without build droppings
    mkdir -p "$work/tree"
    cp -a pyproject.toml README.md src "$work/tree/"
    find "$work/tree/src" \( -name '__pycache__' -o -name '*.egg-info' \) -prune -exec rm -rf {} +
fi
"$python" -m pip wheel --no-deps --no-build-isolation --no-index -q -w "$out" "$work/tree" \
    2> >(grep -v -e "^WARNING: Location 'file:" -e "is neither a file nor a directory" >&2)
ls "$out"/herder-"${SETUPTOOLS_SCM_PRETEND_VERSION}"-py3-none-any.whl 2>/dev/null \
    || ls -t "$out"/herder-*.whl | head -1
