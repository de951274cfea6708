"""The names the master and the nodes agree on for redistribution (docs/ha.md
"Redistribution"): masterd's `redist` pushes by them, noded's `upload_file` white-list reads by
them."""

from __future__ import annotations

# Beside the config: the user-maintained list of files every node receives (one absolute path
# per line, `#` comments).
REDIST_FILES = "redist-files"
# The ssconf value listing every file a node may receive through upload_file (its white-list),
# written first in every push.
UPLOAD_LIST = "redist_files"
