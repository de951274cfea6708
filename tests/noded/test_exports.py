"""The node's export directory (`noded.exports`) on real files: an export being written is
`NAME.new` until its config.ini is in place, then replaces the older export of that instance
whole; only finished exports are listed; names never leave the directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from herder.core import exportconf, paths
from herder.noded import exports


def partial(root: Path, name: str, dump: bytes) -> None:
    directory = root / f"{name}.new"
    directory.mkdir(parents=True)
    (directory / "disk-uuid").write_bytes(dump)


def test_finalize_replaces_the_older_export_whole(tmp_path: Path) -> None:
    partial(tmp_path, "web1", b"old")
    exports.finalize(tmp_path, "web1", "[export]\n")
    partial(tmp_path, "web1", b"new")
    assert exports.list_exports(tmp_path) == ["web1"]  # the one being written is not listed
    exports.finalize(tmp_path, "web1", "[export]\nos = x\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["web1"]
    assert (tmp_path / "web1" / "disk-uuid").read_bytes() == b"new"
    assert (tmp_path / "web1" / exportconf.CONF_FILE).read_text() == "[export]\nos = x\n"


def test_finalize_without_a_partial_export_changes_nothing(tmp_path: Path) -> None:
    partial(tmp_path, "web1", b"old")
    exports.finalize(tmp_path, "web1", "[export]\n")
    with pytest.raises(exports.ExportFailure, match="no export of web2 is being written"):
        exports.finalize(tmp_path, "web2", "[export]\n")
    assert exports.list_exports(tmp_path) == ["web1"]


def test_list_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert exports.list_exports(tmp_path / "none") == []


@pytest.mark.parametrize("name", ["..", "../etc", "a/b", ""])
def test_names_stay_in_the_directory(tmp_path: Path, name: str) -> None:
    with pytest.raises(paths.UnsafeName):
        exports.export_path(tmp_path, name)
