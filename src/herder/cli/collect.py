"""`herder collect NAME`: run one data collector stand-alone, uncached, and print its report."""

from __future__ import annotations

import json
from pathlib import Path

import click

from herder.cli.mond import confd_settings
from herder.core.store import default_config_path
from herder.mond import registry
from herder.mond.collector import MondSettings
from herder.mond.context import make_context
from herder.mond.runner import collect_once, render


def parse_inputs(values: tuple[str, ...], declared: list[str]) -> dict[str, Path]:
    """`NAME=FILE`, or a bare FILE for the collector's first declared input."""
    result: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep:
            if not declared:
                raise click.UsageError("this collector reads no inputs")
            name, path = declared[0], value
        elif name not in declared:
            known = ", ".join(declared) or "none"
            raise click.UsageError(f"unknown input {name!r} (this collector reads: {known})")
        result[name] = Path(path)
    return result


@click.command()
@click.argument("name", required=False)
@click.option("--verbose", is_flag=True, help="Status collectors: all data, not just status.")
@click.option("--input", "inputs", multiple=True, metavar="[NAME=]FILE",
              help="Read a captured input instead of the live source (repeatable).")
@click.option("--node", "node_name", help="Act as this node (default: this host's FQDN).")
@click.option("--plugin-dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--diagnose-dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--libvirt-uri", help="libvirt URI for instance/hypervisor collectors.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where the node's daemons keep their pid files, as mond's --run-dir "
                   "(the daemon collectors; default: mond's).")
@click.option("--confd", "confd_peers", multiple=True, metavar="HOST[:PORT]",
              help="Without a cluster config, ask this confd (repeatable), e.g. for DRBD minors.")
@click.option("--confd-key", type=click.Path(dir_okay=False, path_type=Path),
              help="confd's HMAC key file (default: hmac.key beside the config path).")
@click.option("--list", "list_only", is_flag=True, help="List the collectors and their inputs.")
@click.pass_context
def collect(ctx: click.Context, name: str | None, verbose: bool, inputs: tuple[str, ...],
            node_name: str | None, plugin_dir: Path | None, diagnose_dir: Path | None,
            libvirt_uri: str | None, run_dir: Path | None, confd_peers: tuple[str, ...],
            confd_key: Path | None,
            list_only: bool) -> None:
    """Run the data collector NAME once, stand-alone and uncached, and print its report.

    The output is the same report object the mond daemon serves at
    /1/report/CATEGORY/NAME. Uses the cluster config (--config / $HERDER_CONFIG) when present.

    \b
    Examples:
      herder collect --list
      herder collect node-os
      herder collect drbd --verbose --input proc_drbd=/tmp/proc_drbd.txt
      herder collect diskstats --input /proc/diskstats
      herder collect drbd --verbose --confd 192.0.2.1 --confd-key /var/lib/ganeti/hmac.key
    """
    collectors = registry.builtin_collectors()
    if list_only or not name:
        if not name and not list_only:
            raise click.UsageError("give a collector NAME (or --list)")
        for cls in collectors.values():
            extra = f"  inputs: {', '.join(cls.inputs)}" if cls.inputs else ""
            click.echo(f"{cls.name:16} {cls.path_category():11} kind {int(cls.kind)}{extra}")
        return
    try:
        cls = registry.get(name)
    except KeyError as err:
        raise click.UsageError(str(err.args[0])) from None
    settings = MondSettings()
    if plugin_dir:
        settings.plugin_dir = plugin_dir
    if diagnose_dir:
        settings.diagnose_dir = diagnose_dir
    if libvirt_uri:
        settings.libvirt_uri = libvirt_uri
    if run_dir:
        settings.run_dir = run_dir
    settings.confd_peers = confd_settings(confd_peers)
    settings.confd_key_file = confd_key
    config_path = (ctx.find_root().obj or {}).get("config_path") or default_config_path()
    context = make_context(config_path, node_name=node_name, settings=settings,
                           inputs=parse_inputs(inputs, list(cls.inputs)))
    collector = cls(context)
    sample = collect_once(collector)
    click.echo(json.dumps(render(collector, sample, verbose=verbose), indent=2))
