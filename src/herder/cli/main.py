"""The `herder` entry point.

One scheme for every component: a daemon starts with `herder <daemon> [--bind] [--port]`, its
client actions are subcommands of the same group, and stand-alone tools are top-level commands.
Groups are loaded lazily so `herder alloc` does not import the daemons' dependencies.
"""

from __future__ import annotations

import gc
import importlib
import sys

import click

from herder.core.errors import HerderError

# name -> "module:attribute" of a click command or group. Add a line per command group.
COMMANDS: dict[str, str] = {
    "cluster": "herder.cli.cluster:cluster",
    "group": "herder.cli.group:group",
    "network": "herder.cli.network:network",
    "node": "herder.cli.node:node",
    "instance": "herder.cli.instance:instance",
    "backup": "herder.cli.backup:backup",
    "move-instance": "herder.cli.move_instance:move_instance",
    "tags": "herder.cli.tags:tags",
    "alloc": "herder.cli.alloc:alloc",
    "balance": "herder.cli.alloc:balance",
    "capacity": "herder.cli.alloc:capacity",
    "collect": "herder.cli.collect:collect",
    "mond": "herder.cli.mond:mond",
    "masterd": "herder.cli.masterd:masterd",
    "noded": "herder.cli.noded:noded",
    "storage": "herder.cli.storage:storage",
    "os": "herder.cli.storage:os_group",
    "job": "herder.cli.job:job",
    "filter": "herder.cli.filter:filter_group",
    "confd": "herder.cli.confd:confd",
    "maintd": "herder.cli.maintd:maintd",
    "instmon": "herder.cli.instmon:instmon",
    "supervise": "herder.cli.supervise:supervise",
    "daemon-util": "herder.cli.supervise:daemon_util",
    "etcd": "herder.cli.etcd:etcd",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when used (or listed in --help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self._load(name) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            # A command group whose module is not part of this build yet is simply not offered.
            if err.name == module_name:
                return None
            raise
        command = getattr(module, attr, None)
        return command if isinstance(command, click.Command) else None


def _print_version(ctx: click.Context) -> None:
    """click's version option, with the version looked up only when asked (importlib.metadata
    costs every command ~50 ms: herder.__init__)."""
    import herder

    click.echo(f"herder, version {herder.__version__}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=lambda ctx, _param, value: _print_version(ctx) if value else None,
              help="Show the version of this build and exit.")
@click.option(
    "--config",
    "config_path",
    envvar="HERDER_CONFIG",
    type=click.Path(dir_okay=False),
    default=None,
    help="Cluster config file (default: $HERDER_CONFIG, else /var/lib/herder/config.json).",
)
@click.option("--offline", is_flag=True, envvar="HERDER_OFFLINE",
              help="Change the config file directly instead of through masterd.")
@click.option("--masterd", "masterd_url", envvar="HERDER_MASTERD", metavar="URL",
              help="masterd's RAPI URL (default: https://<master ip>:5080).")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, offline: bool,
        masterd_url: str | None) -> None:
    """herder watches, heals and places virtual machines across a cluster of hypervisor nodes.

    \b
    Start here:
      herder cluster init mycluster.example.com   create a cluster config and its secrets
      herder cluster info                         show it
      herder node add node1.example.com --ip 192.0.2.10
      herder alloc request.json                   answer an iallocator request (hail-compatible)

    Every command finds the cluster config through --config or $HERDER_CONFIG. Changes go
    through the master daemon (herder masterd) as jobs; --offline edits the config file
    directly. Add --help to any command for its options.
    """
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path
    ctx.obj["offline"] = offline
    ctx.obj["masterd"] = masterd_url


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the process exit code. herder's own errors print one line."""
    try:
        # Without standalone mode click *returns* the code of `ctx.exit(N)` /
        # `raise click.exceptions.Exit(N)` instead of raising it: keep it.
        result = cli.main(args=argv, prog_name="herder", standalone_mode=False)
    except click.exceptions.Exit as exit_:
        return exit_.exit_code
    except click.ClickException as err:
        err.show()
        return err.exit_code
    except click.Abort:
        click.echo("Aborted.", err=True)
        return 1
    except HerderError as err:
        click.echo(f"herder: error: {err}", err=True)  # one clear line
        return 1
    except BrokenPipeError:
        return 0
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def run() -> None:
    """Console-script entry point. The command's objects are left to the operating system
    (`gc.freeze`: the interpreter's last collections skip them): a command ends right after
    its answer, and walking its objects at exit cost `instance migrate` 20-25 ms of CPU on a
    loaded machine, after the answer was printed and before the shell got it back."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
