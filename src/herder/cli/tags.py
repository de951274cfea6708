"""`herder tags ...`: tags on the cluster, node groups, nodes and instances."""

from __future__ import annotations

import click

from herder.cli import remote
from herder.cli.common import json_option, print_json
from herder.core import model
from herder.core.errors import HerderError
from herder.core.store import ConfigStore

KINDS = ("cluster", "group", "node", "instance")


def _target(config: model.ConfigData, kind: str,
            args: tuple[str, ...]) -> tuple[model.Named | model.Cluster, list[str]]:
    """The tagged object and the remaining arguments."""
    if kind == "cluster":
        return config.cluster, list(args)
    if not args:
        raise HerderError(f"give the {kind}'s name or UUID")
    name, rest = args[0], list(args[1:])
    finders = {"group": config.find_group, "node": config.find_node,
               "instance": config.find_instance}
    return finders[kind](name), rest


@click.group()
def tags() -> None:
    """List, add and remove tags.

    \b
    herder tags list cluster
    herder tags add node node1.example.com rack:a12 ssd
    herder tags remove instance web1 old-tag
    """


@tags.command("list")
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("name", required=False)
@json_option
@remote.pass_store
def list_(store: ConfigStore, kind: str, name: str | None, as_json: bool) -> None:
    """List the tags of the cluster, or of the group/node/instance NAME."""
    config = store.load()
    obj, _ = _target(config, kind, (name,) if name else ())
    if as_json:
        print_json(sorted(obj.tags))
    else:
        for tag in sorted(obj.tags):
            click.echo(tag)


OP_KINDS = {"cluster": "cluster", "group": "nodegroup", "node": "node", "instance": "instance"}
RAPI_KINDS = {"group": "groups", "node": "nodes", "instance": "instances"}


def _change(ctx: click.Context, op_id: str, kind: str, args: tuple[str, ...]) -> None:
    name, tag_list = (None, list(args)) if kind == "cluster" else (args[0], list(args[1:]))
    if not tag_list:
        raise HerderError("give at least one tag")
    for tag in tag_list:
        model.check_tag(tag)
    method = "PUT" if op_id == "OP_TAGS_SET" else "DELETE"
    path = "/2/tags" if kind == "cluster" else f"/2/{RAPI_KINDS[kind]}/{name}/tags"
    remote.run(ctx, [{"OP_ID": op_id, "kind": OP_KINDS[kind], "name": name, "tags": tag_list}],
               rapi=lambda api: api.request(method, path, [("tag", t) for t in tag_list]))


@tags.command()
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("args", nargs=-1, required=True, metavar="[NAME] TAG...")
@click.pass_context
def add(ctx: click.Context, kind: str, args: tuple[str, ...]) -> None:
    """Add tags (cluster: TAG...; others: NAME TAG...)."""
    _change(ctx, "OP_TAGS_SET", kind, args)


@tags.command()
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("args", nargs=-1, required=True, metavar="[NAME] TAG...")
@click.pass_context
def remove(ctx: click.Context, kind: str, args: tuple[str, ...]) -> None:
    """Remove tags (cluster: TAG...; others: NAME TAG...)."""
    _change(ctx, "OP_TAGS_DEL", kind, args)
