#!/usr/bin/env bash
# Run a pip command, hiding this machine's noise about absent local wheel directories,
# and keep pip's exit status.
set -o pipefail
"$@" 2>&1 | grep -v -e "^WARNING: Location 'file:" -e "is neither a file nor a directory"
status=${PIPESTATUS[0]}
exit "$status"
