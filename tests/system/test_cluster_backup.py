"""`herder cluster backup` / `restore` (issue 34 item 8): the backup is the config as readers see
it (the snapshot with its journal's changes) and the secrets; a restore brings both back exactly,
only while no masterd answers here, and a bad file or a running masterd changes nothing."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from herder.core.store import FileStore

INIT = ("cluster", "init", "cluster.example.com", "--master-node", "node1.example.com",
        "--primary-ip", "192.0.2.11", "--force")
SECRETS = ("hmac.key", "server.pem", "rapi_users")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def files(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in SECRETS}


@pytest.fixture
def cluster(herder):
    assert herder(*INIT).code == 0
    # changes after the snapshot: they live in the journal only
    for node, ip in (("node2.example.com", "192.0.2.12"), ("node3.example.com", "192.0.2.13")):
        done = herder("node", "add", node, "--ip", ip, "--no-node-check")
        assert done.code == 0, done.err
    journal = herder.config_path.with_name("config.json.journal")
    assert journal.exists() and journal.stat().st_size > 0
    return herder


def assert_one_line_error(result, fragment: str) -> None:
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert result.code != 0 and len(lines) == 1 and fragment in lines[0], result.err


def test_backup_and_restore_bring_back_config_and_secrets(cluster, tmp_path: Path) -> None:
    store = FileStore(cluster.config_path)
    directory = cluster.config_path.parent
    before, secrets = store.load(), files(directory)
    backup = tmp_path / "cluster.backup"
    done = cluster("cluster", "backup", str(backup))
    assert done.code == 0, done.err
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    # the cluster moves on: a node removed, a key replaced
    assert cluster("node", "remove", "node3.example.com").code == 0
    (directory / "hmac.key").write_bytes(b"0" * 40 + b"\n")
    assert store.load().serial_no != before.serial_no
    done = cluster("cluster", "restore", str(backup), "--yes", "--masterd-port",
                   str(free_port()))
    assert done.code == 0, done.err
    after = FileStore(cluster.config_path).load()
    assert after == before
    assert {n.name for n in after.nodes.values()} == {
        "node1.example.com", "node2.example.com", "node3.example.com"}
    assert files(directory) == secrets
    assert all(stat.S_IMODE((directory / name).stat().st_mode) == 0o600 for name in SECRETS)


def test_restore_refuses_while_masterd_answers_and_bad_files(cluster, tmp_path: Path) -> None:
    store = FileStore(cluster.config_path)
    directory = cluster.config_path.parent
    backup = tmp_path / "cluster.backup"
    assert cluster("cluster", "backup", str(backup)).code == 0
    assert cluster("node", "remove", "node3.example.com").code == 0
    changed, secrets = store.load(), files(directory)
    with socket.socket() as masterd:  # what a running masterd looks like from here
        masterd.bind(("127.0.0.1", 0))
        masterd.listen()
        port = masterd.getsockname()[1]
        refused = cluster("cluster", "restore", str(backup), "--yes", "--masterd-port",
                          str(port))
    assert_one_line_error(refused, "stop it before a restore")
    broken = tmp_path / "broken.backup"
    broken.write_bytes(backup.read_bytes().replace(b'"hmac.key":"', b'"hmac.key":"!'))
    assert_one_line_error(cluster("cluster", "restore", str(broken), "--yes"),
                          "secret hmac.key is not base64")
    other = tmp_path / "config.json"
    other.write_bytes(cluster.config_path.read_bytes())
    assert_one_line_error(cluster("cluster", "restore", str(other), "--yes"),
                          "is not a herder cluster backup")
    assert FileStore(cluster.config_path).load() == changed
    assert files(directory) == secrets
