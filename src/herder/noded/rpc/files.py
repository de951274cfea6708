"""Redistribution (docs/ha.md "Redistribution"): the files the cluster distributes, the ssconf
facts, and a master candidate's copy of the config and the job queue."""

from __future__ import annotations

import base64
import contextlib
import os
from pathlib import Path

from herder.core.cluster_secrets import DOMAIN_SECRET_FILE, SecretPaths
from herder.core.errors import StoreError
from herder.core.redist import JOB_FILE, REDIST_FILES, UPLOAD_LIST, archive_path
from herder.core.rpcdefs import file_calls
from herder.core.store import CONFIG_MODE, FileStore, atomic_write
from herder.noded import libvirt_tls
from herder.noded.node import Node, RpcFailure


def upload_allowed(node: Node) -> set[str]:
    """The white-list of upload_file: the cluster secrets (with the cluster domain secret)
    and the user list beside the config, and the files the master listed in ssconf
    `redist_files`."""
    secrets = SecretPaths.beside(node.settings.config_dir / "config.json")
    allowed = {str(p) for p in secrets.all()}
    allowed.add(str(node.settings.config_dir / REDIST_FILES))
    allowed.add(str(node.settings.config_dir / DOMAIN_SECRET_FILE))
    with contextlib.suppress(OSError):
        listed = (node.ssconf_dir / f"ssconf_{UPLOAD_LIST}").read_text().splitlines()
        allowed.update(line.strip() for line in listed if line.strip())
    return allowed


def upload_file(node: Node, call: file_calls.UploadFile) -> file_calls.UploadAnswer:
    """Write a white-listed file (absolute `path`, base64 `data`, `mode`, optional
    `uid`/`gid`) atomically under the file root."""
    path = call.path
    parts = Path(path).parts
    if not path.startswith("/") or ".." in parts or "\0" in path \
            or (len(parts) > 1 and parts[1] in ("proc", "sys", "dev")):
        raise RpcFailure(f"refusing to upload to {path!r}: not a plain absolute path")
    if path not in upload_allowed(node):
        raise RpcFailure(f"refusing to upload {path}: not a file the cluster distributes")
    target = node.local(path)
    data = base64.b64decode(call.data, validate=True)
    mode = call.mode & 0o777
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data, mode)
    os.chmod(target, mode)  # atomic_write's mode is filtered by the umask
    if call.uid is not None or call.gid is not None:
        os.chown(target, -1 if call.uid is None else call.uid,
                 -1 if call.gid is None else call.gid)
    return file_calls.UploadAnswer(path=str(target), size=len(data))


def write_ssconf(node: Node, call: file_calls.WriteSsconf) -> list[str]:
    """Write `ssconf_<name>` files (Ganeti's ssconf) atomically into the data directory."""
    node.ssconf_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in sorted(call.values.items()):
        atomic_write(node.ssconf_dir / f"ssconf_{name}", str(text).encode(), 0o644)
        written.append(name)
    node.follow_node_params()
    if libvirt_tls.SSCONF_NAME in call.values:  # the master's libvirt CAs: trusted at once
        libvirt_tls.refresh(node.data_dir, conf=node.local(libvirt_tls.LIBVIRTD_CONF))
    return written


def write_config(node: Node, call: file_calls.WriteConfig) -> file_calls.WriteConfigAnswer:
    """A master candidate's copy of the config and the job queue where its readers find
    them (`<data dir>/config.json`, `<data dir>/queue/`: confd, mond, and masterd after a
    failover): written atomically under the config's writer lock, and only forward (an
    older serial than the copy's is refused). With `journal`, the master's journal: the
    whole file beside a new snapshot, or its new records appended where this copy's
    journal ends (refused unless this copy continues the same snapshot up to `offset`),
    so a change costs the candidate its records, not the document."""
    current = node.data_dir / "config.json"
    store = FileStore(current)
    queue_dir = node.data_dir / "queue"
    journal = call.journal
    with node.files_lock, store.locked():
        have: int | None = None
        if call.config is not None or journal is None or journal.offset == 0:
            # through the store: a former master's snapshot has a journal beside it
            have = store.serial_no()
            if have is not None and call.serial < have:
                raise RpcFailure(f"refusing config serial {call.serial}: this node has {have}")
        records = base64.b64decode(journal.data, validate=True) if journal else b""
        queue_dir.mkdir(parents=True, exist_ok=True)
        if call.config is not None:
            atomic_write(current, call.config.encode(), CONFIG_MODE)
        if journal is not None:
            try:
                store.write_journal(journal.snapshot, journal.offset, records)
            except StoreError as err:
                raise RpcFailure(str(err)) from None
        _write_queue_copy(queue_dir, call.queue or file_calls.QueueCopy())
    return file_calls.WriteConfigAnswer(serial=call.serial, previous=have)


def _write_queue_copy(queue_dir: Path, queue: file_calls.QueueCopy) -> None:
    """The master's job files, its newly archived ones filed under `queue/archive/`, and the
    names it no longer holds gone (a job file to the archive unless it is there already)."""
    for name, data in sorted(queue.files.items()):
        atomic_write(queue_dir / name, base64.b64decode(data, validate=True), 0o600)
    for name, data in sorted(queue.archived.items()):
        target = archive_path(queue_dir, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, base64.b64decode(data, validate=True), 0o600)
        with contextlib.suppress(FileNotFoundError):
            (queue_dir / name).unlink()
    if queue.names is None:
        return
    keep = set(queue.names)
    for path in queue_dir.glob("*.json"):
        if path.name in keep:
            continue
        archived = archive_path(queue_dir, path.name) if JOB_FILE.match(path.name) else None
        with contextlib.suppress(FileNotFoundError):
            if archived is None or archived.exists():
                path.unlink()
            else:
                archived.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, archived)
