"""`herder move-instance`: Ganeti's `tools/move-instance`, moving instances from one cluster to
another through both clusters' RAPI (so either may be a Ganeti 3.0 cluster).

For each instance, in this order (Ganeti's steps, made safe for the data):
1. the source's instance read, and its remote export prepared (`prepare-export?mode=remote`:
   the signed handshake, key name and CA);
2. the target's creation in mode `remote-import` tried as a dry run (the name, the placement,
   the fit, the other cluster's signatures), so a target that cannot take it changes nothing;
3. the source instance shut down (its state remembered);
4. the creation submitted; its job log's `remote-import` entry says where each disk goes;
5. the source's remote export submitted with that (`shutdown`, not `remove_instance`): each disk
   streamed from the source node straight into the target's;
6. both jobs awaited; the target instance running (when the source ran);
7. only then the source instance removed (unless `--keep-source-instance`).
A failure after step 3 starts the source again when it ran, unless the target's instance was
made (then the source stays down: never two running copies); the target's job removes its
partial instance itself."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from herder.core.errors import HerderError
from herder.core.rapi import JOB_STATUS_FINAL, RapiClient, RapiError, job_error_message

DEFAULT_RAPI_PORT = 5080
REMOTE_IMPORT_LOG = "remote-import"  # Ganeti's ELOG_REMOTE_IMPORT
JOB_TIMEOUT = 6 * 3600.0  # seconds for one job of the move (a disk's stream included)
RUNNING_TIMEOUT = 300.0  # seconds for the target's instance to be seen running


class MoveError(HerderError):
    """A move that could not be made (one line)."""


@dataclass
class MoveRequest:
    """One instance's move and the choices for the target."""

    name: str
    dest_name: str
    pnode: str | None = None
    snode: str | None = None
    iallocator: str | None = None
    disk_template: str | None = None
    beparams: dict[str, Any] = field(default_factory=dict)
    hvparams: dict[str, Any] = field(default_factory=dict)
    keep_source: bool = False


def client(cluster: str, port: int, ca_file: str | None, username: str | None,
           password_file: str | None) -> RapiClient:
    """A RAPI client of one cluster: its certificate pinned with a CA file (the host name is
    not checked: herder's and Ganeti's cluster certificates name the cluster), else the
    system's CAs."""
    password = None
    if password_file is not None:
        try:
            password = Path(password_file).read_text().splitlines()[0].strip()
        except (OSError, IndexError, UnicodeDecodeError):
            raise MoveError(f"cannot read a password from {password_file}") from None
    host = f"[{cluster}]" if ":" in cluster else cluster
    return RapiClient(f"https://{host}:{port}", username, password,
                      verify=ca_file if ca_file is not None else True,
                      check_hostname=ca_file is None, timeout=60.0)


def _job(api: RapiClient, job_id: int, what: str) -> Any:
    """The result of a job that must succeed; MoveError naming its error otherwise."""
    done = api.wait_for_job(job_id, timeout=JOB_TIMEOUT)
    if done.get("status") != "success":
        raise MoveError(f"{what} failed (job {job_id}): {job_error_message(done)}")
    return (done.get("opresult") or [None])[0]


def _creation(instance: dict[str, Any], request: MoveRequest, expinfo: dict[str, Any]
              ) -> dict[str, Any]:
    """The target's OP_INSTANCE_CREATE in mode remote-import (Ganeti's body of
    move-instance's `_CreateInstance`)."""
    nics = []
    for index, mac in enumerate(instance.get("nic.macs") or []):
        nic = {"mac": mac}
        for key, column in (("ip", "nic.ips"), ("mode", "nic.modes"), ("link", "nic.links"),
                            ("network", "nic.networks.names"), ("name", "nic.names")):
            values = instance.get(column) or []
            if index < len(values) and values[index] is not None:
                nic[key] = values[index]
        nics.append(nic)
    names = instance.get("disk.names") or []
    disks = [{"size": size, **({"name": names[i]} if i < len(names) and names[i] else {})}
             for i, size in enumerate(instance.get("disk.sizes") or [])]
    body: dict[str, Any] = {
        "__version__": 1, "mode": "remote-import", "name": request.dest_name,
        "disk_template": request.disk_template or instance["disk_template"], "disks": disks,
        "nics": nics, "os": instance.get("os"), "hypervisor": instance.get("hypervisor"),
        "start": instance.get("admin_state") == "up", "ip_check": False, "name_check": False,
        "source_handshake": expinfo["handshake"], "source_x509_ca": expinfo["x509_ca"],
        "source_instance_name": instance["name"],
        "beparams": {**(instance.get("custom_beparams") or {}), **request.beparams},
        "hvparams": {**(instance.get("custom_hvparams") or {}), **request.hvparams},
        "osparams": dict(instance.get("custom_osparams") or {}),
    }
    for key, value in (("pnode", request.pnode), ("snode", request.snode),
                       ("iallocator", request.iallocator)):
        if value is not None:
            body[key] = value
    return body


def _wait_for_destinations(api: RapiClient, job_id: int) -> dict[str, Any]:
    """The creation job's `remote-import` log entry (where each disk goes); MoveError when
    the job ends without one."""
    deadline = time.monotonic() + JOB_TIMEOUT
    prev_info: list[Any] | None = None
    serial: int | None = None
    while time.monotonic() < deadline:
        change = api.wait_for_job_change(job_id, ["status"], prev_info, serial)
        if change is None:
            continue
        for entry in change.get("log_entries") or []:
            serial = max(int(entry[0]), serial or 0)
            if entry[2] == REMOTE_IMPORT_LOG and isinstance(entry[3], dict):
                return entry[3]
        prev_info = list(change.get("job_info") or []) or prev_info
        if prev_info and prev_info[0] in JOB_STATUS_FINAL:
            job = api.get_job_status(job_id)
            raise MoveError(f"the target's creation failed (job {job_id}): "
                            f"{job_error_message(job)}")
    raise MoveError(f"the target's creation (job {job_id}) never said where the disks go")


class InstanceMove:
    """One instance moved from the `source` cluster to the `target` cluster."""

    def __init__(self, source: RapiClient, target: RapiClient, request: MoveRequest,
                 say: Callable[[str], None] = click.echo) -> None:
        self.source, self.target, self.request, self.say = source, target, request, say
        self._key: object = None  # the source's signed x509 key name
        self._target_made = False  # the target's instance exists: the source stays down

    def _source_instance(self) -> dict[str, Any]:
        try:
            return self.source.get_instance(self.request.name)
        except RapiError as err:
            if err.status == 404:
                raise MoveError(f"instance {self.request.name} not found on the source "
                                "cluster") from None
            raise

    def run(self) -> None:
        req = self.request
        instance = self._source_instance()
        self.say(f"preparing the export of {req.name}")
        expinfo = _job(self.source, self.source.request(
            "PUT", f"/2/instances/{req.name}/prepare-export", [("mode", "remote")]),
            "the source's export preparation")
        self._key = expinfo["x509_key_name"]
        body = _creation(instance, req, expinfo)
        _job(self.target, self.target.request("POST", "/2/instances", [("dry-run", 1)], body),
             f"the target's checks for {req.dest_name}")
        was_running = instance.get("admin_state") == "up"
        if was_running:
            self.say(f"shutting down {req.name}")
            _job(self.source, self.source.shutdown_instance(req.name),
                 f"the shutdown of {req.name}")
        try:
            self._transfer(body)
        except HerderError as err:
            if self._target_made:  # never a second running copy: the source stays down
                raise MoveError(f"move of {req.name}: {err}; {req.name} is kept stopped on "
                                "the source cluster") from None
            if was_running:
                self.say(f"starting {req.name} again on the source cluster")
                try:
                    _job(self.source, self.source.startup_instance(req.name),
                         f"the restart of {req.name}")
                except HerderError as start_err:
                    self.say(f"could not start {req.name} again: {start_err}")
            raise MoveError(f"move of {req.name} failed: {err}") from None
        if req.keep_source:
            self.say(f"{req.name} kept (stopped) on the source cluster")
            return
        self.say(f"removing {req.name} from the source cluster")
        _job(self.source, self.source.delete_instance(req.name),
             f"the removal of {req.name} from the source (the target runs it: remove the "
             "source yourself)")

    def _transfer(self, body: dict[str, Any]) -> None:
        req = self.request
        creating = int(self.target.request("POST", "/2/instances", None, body))
        self.say(f"creating {req.dest_name} on the target cluster (job {creating})")
        impinfo = _wait_for_destinations(self.target, creating)
        exporting = int(self.source.request("PUT", f"/2/instances/{req.name}/export", None, {
            "mode": "remote", "destination": impinfo["disks"], "shutdown": True,
            "remove_instance": False, "x509_key_name": self._key,
            "destination_x509_ca": impinfo["x509_ca"]}))
        self.say(f"streaming the disks of {req.name} (job {exporting})")
        try:
            result = _job(self.source, exporting, f"the export of {req.name}")
        finally:
            created = self.target.wait_for_job(creating, timeout=JOB_TIMEOUT)
            # The target may have made the instance though the source's job failed: a source
            # master that died mid-stream fails its job when it starts again, while its node
            # finished the stream. The source must then stay down (never two running copies).
            self._target_made = created.get("status") == "success"
        if not (isinstance(result, list) and result and result[0] and all(result[1])):
            raise MoveError(f"the export of {req.name} failed for some disks: {result}")
        if created.get("status") != "success":
            raise MoveError(f"the target's creation failed (job {creating}): "
                            f"{job_error_message(created)}")
        self._target_made = True
        if body["start"]:
            deadline = time.monotonic() + RUNNING_TIMEOUT
            while not self.target.get_instance(req.dest_name).get("oper_state"):
                if time.monotonic() > deadline:
                    raise MoveError(f"{req.dest_name} was created but is not seen running on "
                                    f"the target cluster within {RUNNING_TIMEOUT:.0f} s")
                time.sleep(2.0)
            self.say(f"{req.dest_name} runs on the target cluster")



@click.command("move-instance")
@click.argument("src_cluster", metavar="SOURCE_CLUSTER")
@click.argument("dest_cluster", metavar="DEST_CLUSTER")
@click.argument("names", metavar="INSTANCE...", nargs=-1, required=True)
@click.option("--src-rapi-port", type=click.IntRange(1, 65535), default=DEFAULT_RAPI_PORT,
              show_default=True, help="The source cluster's RAPI port.")
@click.option("--src-ca-file", help="The source cluster's certificate (default: system CAs).")
@click.option("--src-username", help="A RAPI user of the source cluster (writes).")
@click.option("--src-password-file", help="A file holding that user's password.")
@click.option("--dest-rapi-port", type=click.IntRange(1, 65535), default=DEFAULT_RAPI_PORT,
              show_default=True, help="The target cluster's RAPI port.")
@click.option("--dest-ca-file", help="The target cluster's certificate (default: system CAs).")
@click.option("--dest-username", help="A RAPI user of the target cluster (writes).")
@click.option("--dest-password-file", help="A file holding that user's password.")
@click.option("--dest-instance-name", help="The name on the target (one instance only).")
@click.option("--dest-primary-node", help="The target's primary node (else its allocator).")
@click.option("--dest-secondary-node", help="The target's secondary node (drbd).")
@click.option("--dest-disk-template", help="Another disk template on the target.")
@click.option("-I", "--iallocator", help="The target's allocator for the placement.")
@click.option("-B", "--backend-parameters", "be", multiple=True,
              help="Over the instance's, on the target (KEY=VALUE[,...]).")
@click.option("-H", "--hypervisor-parameters", "hv", multiple=True,
              help="Over the instance's, on the target (KEY=VALUE[,...]).")
@click.option("--compress", type=click.Choice(["none"]), default="none",
              help="Only none: the streams are not compressed.")
@click.option("--keep-source-instance", is_flag=True,
              help="Keep the source instance (stopped) once the target runs.")
def move_instance(src_cluster: str, dest_cluster: str, names: tuple[str, ...],
                  src_rapi_port: int, src_ca_file: str | None, src_username: str | None,
                  src_password_file: str | None, dest_rapi_port: int,
                  dest_ca_file: str | None, dest_username: str | None,
                  dest_password_file: str | None, dest_instance_name: str | None,
                  dest_primary_node: str | None, dest_secondary_node: str | None,
                  dest_disk_template: str | None, iallocator: str | None,
                  be: tuple[str, ...], hv: tuple[str, ...], compress: str,
                  keep_source_instance: bool) -> None:
    """Move instances from SOURCE_CLUSTER to DEST_CLUSTER (Ganeti's move-instance): each shut
    down, its disks streamed from the source node straight into the target's, the source
    removed only once the target runs. Both clusters share the cluster domain secret."""
    from herder.cli.instance import hv_option
    from herder.core import params

    if dest_instance_name and len(names) > 1:
        raise click.UsageError("--dest-instance-name takes one instance")
    if iallocator and (dest_primary_node or dest_secondary_node):
        raise click.UsageError("Destination node and iallocator options exclude each other")
    beparams = params.parse_assignments(be) if be else {}
    hypervisor, hvparams = hv_option(hv)
    if hypervisor is not None:
        raise click.UsageError("-H takes the instance's hypervisor's parameters, without a "
                               "hypervisor name")
    with client(src_cluster, src_rapi_port, src_ca_file, src_username,
                src_password_file) as source, \
            client(dest_cluster, dest_rapi_port, dest_ca_file, dest_username,
                   dest_password_file) as target:
        for name in names:
            InstanceMove(source, target, MoveRequest(
                name=name, dest_name=dest_instance_name or name, pnode=dest_primary_node,
                snode=dest_secondary_node, iallocator=iallocator,
                disk_template=dest_disk_template, beparams=beparams, hvparams=hvparams,
                keep_source=keep_source_instance)).run()
            click.echo(f"Moved {name} to {dest_cluster}")
