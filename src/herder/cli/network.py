"""`herder network ...`: networks and their IP pools, as Ganeti 3.0's gnt-network (add,
modify, remove, connect, disconnect, list, info). NETWORK is a name or a UUID."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from herder.cli import listing, remote
from herder.cli.common import json_option, print_json, print_mapping

if TYPE_CHECKING:
    from collections.abc import Callable

    from herder.core.rapi import RapiClient


@click.group()
def network() -> None:
    """List, add, change, connect and remove networks (gnt-network)."""


# a row's key -> masterd's query field (Ganeti's names) that gives it
QUERY_FIELDS = {"name": "name", "uuid": "uuid", "network": "network", "gateway": "gateway",
                "network6": "network6", "gateway6": "gateway6", "mac_prefix": "mac_prefix",
                "free_count": "free_count", "reserved_count": "reserved_count", "map": "map",
                "external_reservations": "external_reservations", "group_list": "group_list",
                "inst_list": "inst_list", "tags": "tags"}


def _rows(ctx: click.Context) -> list[dict[str, Any]]:
    rows, _ = remote.query_rows(ctx, "network", QUERY_FIELDS)
    return rows


LIST = listing.ListSpec(
    "network", "networks",
    # Ganeti's gnt-network list defaults
    ("name", "network", "gateway", "mac_prefix", "group_list", "tags"),
    ("name", "uuid", "network", "gateway", "network6", "gateway6", "mac_prefix", "free_count",
     "reserved_count", "group_list", "inst_list", "tags"),
    formats={"inst_list": listing.join, "tags": listing.join,
             "group_list": lambda groups: ", ".join(f"{g[0]} ({g[1]}, {g[2]}, {g[3]})"
                                                    for g in groups or [])},
    units=False)


@network.command("list")
@listing.list_options(LIST)
@click.pass_context
def list_(ctx: click.Context, names: tuple[str, ...], output: str | None, force_filter: bool,
          no_headers: bool, separator: str | None, verbose: bool, as_json: bool) -> None:
    """List networks, as gnt-network list: NAME... or a filter selects them, -o the fields
    (list-fields shows them all)."""
    listing.run_list(ctx, LIST, names, output=output, force_filter=force_filter,
                     no_headers=no_headers, separator=separator, units=None,
                     verbose=verbose, as_json=as_json)


listing.add_list_fields(network, LIST)


@network.command()
@click.argument("names", nargs=-1, metavar="NETWORK...")
@json_option
@click.pass_context
def info(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Show networks (all without NETWORK) with their IP pool, as gnt-network info: the
    free and reserved counts, the pool's map (X reserved, . free), the external
    reservations, the connected groups and the instances with NICs on them."""
    rows = _rows(ctx)
    if names:
        by_key = {key: r for r in rows for key in (r["name"], r["uuid"])}
        missing = [n for n in names if n not in by_key]
        if missing:
            raise click.ClickException(f"network(s) not found: {', '.join(missing)}")
        rows = [by_key[n] for n in names]
    if as_json:
        print_json(rows)
        return
    for row in rows:
        click.echo(f"Network name: {row['name']}")
        print_mapping({
            "UUID": row["uuid"], "Subnet": row["network"], "Gateway": row["gateway"],
            "IPv6 Subnet": row["network6"], "IPv6 Gateway": row["gateway6"],
            "Mac Prefix": row["mac_prefix"], "Size": len(row["map"] or ""),
            "Free": row["free_count"], "Reserved": row["reserved_count"],
            "Map": row["map"], "External reservations": row["external_reservations"],
            "connected to node groups": [f"{g[0]} (mode:{g[1]} link:{g[2]} vlan:{g[3]})"
                                         for g in row["group_list"] or []],
            "used by instances": row["inst_list"] or [], "Tags": row["tags"] or []}, 1)


def _addresses(text: str | None) -> list[str] | None:
    return [a.strip() for a in text.split(",") if a.strip()] if text else None


@network.command()
@click.argument("name", metavar="NETWORK")
@click.option("--network", "subnet", required=True, metavar="SUBNET",
              help="The IPv4 subnet (CIDR, /16 to /30).")
@click.option("--gateway", help="The IPv4 gateway (reserved in the pool).")
@click.option("--network6", metavar="SUBNET6", help="The IPv6 subnet.")
@click.option("--gateway6", help="The IPv6 gateway.")
@click.option("--mac-prefix", help="Three octets (aa:bb:cc) for its NICs' generated MACs.")
@click.option("--add-reserved-ips", metavar="IP,...",
              help="Addresses reserved outside the cluster (comma-separated).")
@click.option("--tags", metavar="TAG,...", help="Tags (comma-separated).")
@click.option("--no-conflicts-check", is_flag=True,
              help="Do not reserve the nodes' and the master's addresses in the pool.")
@click.pass_context
def add(ctx: click.Context, name: str, subnet: str, gateway: str | None,
        network6: str | None, gateway6: str | None, mac_prefix: str | None,
        add_reserved_ips: str | None, tags: str | None, no_conflicts_check: bool) -> None:
    """Add a network (OP_NETWORK_ADD): its pool holds every address of SUBNET, the network,
    broadcast and gateway addresses reserved."""
    body: dict[str, Any] = {"network_name": name, "network": subnet,
                            "conflicts_check": not no_conflicts_check,
                            "tags": [t for t in (tags or "").split(",") if t]}
    for key, value in (("gateway", gateway), ("network6", network6),
                       ("gateway6", gateway6), ("mac_prefix", mac_prefix),
                       ("add_reserved_ips", _addresses(add_reserved_ips))):
        if value is not None:
            body[key] = value
    remote.run(ctx, [{"OP_ID": "OP_NETWORK_ADD", **body}],
               rapi=lambda api: api.request("POST", "/2/networks", None, body))
    click.echo(f"Added network {name}")


@network.command()
@click.argument("name", metavar="NETWORK")
@click.option("--gateway", help="A new IPv4 gateway, or none.")
@click.option("--network6", metavar="SUBNET6", help="A new IPv6 subnet, or none.")
@click.option("--gateway6", help="A new IPv6 gateway, or none.")
@click.option("--mac-prefix", help="A new MAC prefix, or none.")
@click.option("--add-reserved-ips", metavar="IP,...", help="Reserve these addresses.")
@click.option("--remove-reserved-ips", metavar="IP,...", help="Release these reservations.")
@click.pass_context
def modify(ctx: click.Context, name: str, gateway: str | None, network6: str | None,
           gateway6: str | None, mac_prefix: str | None, add_reserved_ips: str | None,
           remove_reserved_ips: str | None) -> None:
    """Change a network (OP_NETWORK_SET_PARAMS); its subnet cannot change."""
    body: dict[str, Any] = {}
    for key, value in (("gateway", gateway), ("network6", network6),
                       ("gateway6", gateway6), ("mac_prefix", mac_prefix),
                       ("add_reserved_ips", _addresses(add_reserved_ips)),
                       ("remove_reserved_ips", _addresses(remove_reserved_ips))):
        if value is not None:
            body[key] = value
    if not body:
        raise click.UsageError("nothing to change; see 'herder network modify --help'")
    remote.run(ctx, [{"OP_ID": "OP_NETWORK_SET_PARAMS", "network_name": name, **body}],
               rapi=lambda api: api.request("PUT", f"/2/networks/{name}/modify", None, body))
    click.echo(f"Modified network {name}")


@network.command()
@click.argument("name", metavar="NETWORK")
@click.pass_context
def remove(ctx: click.Context, name: str) -> None:
    """Remove a network (OP_NETWORK_REMOVE): refused while a node group is connected to it
    or a NIC uses it."""
    remote.run(ctx, [{"OP_ID": "OP_NETWORK_REMOVE", "network_name": name}],
               rapi=lambda api: api.request("DELETE", f"/2/networks/{name}", None, None))
    click.echo(f"Removed network {name}")


def _put(path: str, body: dict[str, Any]) -> Callable[[RapiClient], Any]:
    """Submit through Ganeti's route `PUT path` with `body`."""
    return lambda api: api.request("PUT", path, None, body)


def _groups(ctx: click.Context, given: tuple[str, ...]) -> list[str]:
    """The groups named, or every node group (Ganeti's connect/disconnect without GROUP)."""
    if given:
        return list(given)
    rows, _ = remote.query_rows(ctx, "group", {"name": "name"})
    return [str(r["name"]) for r in rows]


@network.command()
@click.option("-N", "--nic-parameters", "nic", required=True,
              metavar="mode=MODE,link=LINK[,vlan=VLAN]",
              help="How the groups connect it: the NIC mode, link and VLAN.")
@click.option("--no-conflicts-check", is_flag=True,
              help="Connect even when NICs without this network have addresses inside it.")
@click.argument("name", metavar="NETWORK")
@click.argument("groups", nargs=-1, metavar="[GROUP...]")
@click.pass_context
def connect(ctx: click.Context, nic: str, no_conflicts_check: bool, name: str,
            groups: tuple[str, ...]) -> None:
    """Connect a network to node groups (all without GROUP; OP_NETWORK_CONNECT): their
    instances' NICs on it take its mode, link and VLAN there."""
    from herder.core import params

    given = params.parse_assignments([nic])
    unknown = sorted(set(given) - {"mode", "link", "vlan"})
    if unknown:
        raise click.BadParameter(f"unknown NIC parameter(s) {', '.join(unknown)} (mode, link, "
                                 "vlan)", param_hint="-N")
    if not given.get("mode") or not given.get("link"):
        raise click.BadParameter("give mode=MODE,link=LINK", param_hint="-N")
    for group_name in _groups(ctx, groups):
        body = {"group_name": group_name, "network_mode": given["mode"],
                "network_link": given["link"], "network_vlan": given.get("vlan") or "",
                "conflicts_check": not no_conflicts_check}
        remote.run(ctx, [{"OP_ID": "OP_NETWORK_CONNECT", "network_name": name, **body}],
                   rapi=_put(f"/2/networks/{name}/connect", body))
        click.echo(f"Connected network {name} to node group {group_name}")


@network.command()
@click.argument("name", metavar="NETWORK")
@click.argument("groups", nargs=-1, metavar="[GROUP...]")
@click.pass_context
def disconnect(ctx: click.Context, name: str, groups: tuple[str, ...]) -> None:
    """Disconnect a network from node groups (all without GROUP; OP_NETWORK_DISCONNECT):
    refused while an instance of the group has a NIC on it."""
    for group_name in _groups(ctx, groups):
        body = {"group_name": group_name}
        remote.run(ctx, [{"OP_ID": "OP_NETWORK_DISCONNECT", "network_name": name, **body}],
                   rapi=_put(f"/2/networks/{name}/disconnect", body))
        click.echo(f"Disconnected network {name} from node group {group_name}")
