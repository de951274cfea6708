"""`herder instance snapshot`: snapshots of an instance's disks (herder's own: Ganeti has none;
compat B63). Changes are jobs (OP_INSTANCE_SNAPSHOT_*) through herder's routes
`/2/herder/instances/I/snapshots[/NAME]`; the list reads that route (the config with
--offline): the snapshots are recorded in the config, no node is asked."""

from __future__ import annotations

import time
from typing import Any

import click

from herder.cli import remote
from herder.cli.common import json_option, print_json, print_table, store_from
from herder.core import names
from herder.core.errors import HerderError


def _checked(name: str) -> str:
    try:
        return names.snapshot_name(name)
    except names.BadName as err:
        raise HerderError(str(err)) from None


@click.group()
def snapshot() -> None:
    """Snapshots of all of an instance's disks (rbd disks, and ext disks whose ExtStorage
    provider has the snapshot and rollback scripts): add, list, rollback (the instance
    stopped), remove."""


@snapshot.command("add")
@click.argument("name", metavar="INSTANCE")
@click.argument("snapshot_name", metavar="NAME")
@click.pass_context
def add(ctx: click.Context, name: str, snapshot_name: str) -> None:
    """Snapshot every disk of INSTANCE as NAME (OP_INSTANCE_SNAPSHOT_ADD); a running instance's
    disks as they are on the node at that moment."""
    body = {"snapshot_name": _checked(snapshot_name)}
    remote.run(ctx, [{"OP_ID": "OP_INSTANCE_SNAPSHOT_ADD", "instance_name": name, **body}],
               rapi=lambda api: api.request(
                   "POST", f"/2/herder/instances/{name}/snapshots", None, body))
    click.echo(f"Snapshot {snapshot_name} of {name} taken")


def _on_one(ctx: click.Context, name: str, snapshot_name: str, op_id: str, method: str,
            suffix: str = "") -> None:
    """The job of `op_id` on the snapshot `snapshot_name` of `name`, through its route."""
    path = f"/2/herder/instances/{name}/snapshots/{_checked(snapshot_name)}{suffix}"
    remote.run(ctx, [{"OP_ID": op_id, "instance_name": name, "snapshot_name": snapshot_name}],
               rapi=lambda api: api.request(method, path))


@snapshot.command("rollback")
@click.argument("name", metavar="INSTANCE")
@click.argument("snapshot_name", metavar="NAME")
@click.pass_context
def rollback(ctx: click.Context, name: str, snapshot_name: str) -> None:
    """Put every disk of the stopped INSTANCE back to its snapshot NAME
    (OP_INSTANCE_SNAPSHOT_ROLLBACK); what was written since is lost."""
    _on_one(ctx, name, snapshot_name, "OP_INSTANCE_SNAPSHOT_ROLLBACK", "PUT", "/rollback")
    click.echo(f"Rolled {name} back to snapshot {snapshot_name}")


@snapshot.command("remove")
@click.argument("name", metavar="INSTANCE")
@click.argument("snapshot_name", metavar="NAME")
@click.pass_context
def remove(ctx: click.Context, name: str, snapshot_name: str) -> None:
    """Remove the snapshot NAME of INSTANCE: its volumes and its record
    (OP_INSTANCE_SNAPSHOT_REMOVE)."""
    _on_one(ctx, name, snapshot_name, "OP_INSTANCE_SNAPSHOT_REMOVE", "DELETE")
    click.echo(f"Removed snapshot {snapshot_name} of {name}")


def _recorded(ctx: click.Context, name: str) -> list[dict[str, Any]]:
    """The instance's snapshots as the route shows them (from the config with --offline)."""
    if remote.offline(ctx):
        from herder.core.errors import AmbiguousError, NotFoundError
        from herder.masterd import views

        try:
            inst = store_from(ctx).load().find_instance(name)
        except (NotFoundError, AmbiguousError) as err:
            raise HerderError(str(err)) from None
        return [dict(views.snapshot_view(inst, snap)) for snap in inst.snapshots]
    with remote.masterd_client(ctx) as api:
        answer = remote.call(api.request, "GET", f"/2/herder/instances/{name}/snapshots")
    if not isinstance(answer, list):
        raise HerderError(f"masterd answered the snapshots of {name} with {answer!r}")
    return answer


@snapshot.command("list")
@click.argument("name", metavar="INSTANCE")
@json_option
@click.pass_context
def list_(ctx: click.Context, name: str, as_json: bool) -> None:
    """The snapshots of INSTANCE, oldest first: name, when taken, the volume of each disk."""
    rows = _recorded(ctx, name)
    if as_json:
        print_json(rows)
        return
    print_table(["Name", "Taken (UTC)", "Volumes"], [
        [row["name"], time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(row["ctime"]))),
         ", ".join(f"{d['iv_name'] or d['uuid']}={'/'.join(d['volume'])}"
                   for d in row["disks"])]
        for row in rows])


list_.name = "list"
