"""``herder alloc`` / ``herder balance`` / ``herder capacity``: the allocator's command lines.

``herder alloc FILE|-`` is a drop-in iallocator script (hail-compatible): it prints the JSON
response and exits 0 whenever it answered, 1 with a one-line reason on stderr when the input is
unusable. ``herder alloc install`` writes the script Ganeti runs (``DIR/herder``) so that
``gnt-instance add -I herder`` uses it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import tempfile
from typing import TYPE_CHECKING, Any, NoReturn

import click

from herder.alloc.model import Cluster, Node
from herder.alloc.protocol import InputError, Options
from herder.core import gcpause, ports

if TYPE_CHECKING:
    from herder.alloc import hbal, hspace
    from herder.alloc.balance import Move


def _read(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as fh:
        return fh.read()


def _fail(msg: str) -> NoReturn:
    click.echo(f"Error: {msg}", err=True)
    sys.exit(1)


def _text_cluster(path: str | None, simulate: tuple[str, ...],
                  ignore_dynu: bool = False) -> Cluster | None:
    if path and simulate:
        _fail("Only one of the data file and --simulate options should be given.")
    if path:
        from herder.alloc.textdata import parse_text

        try:
            text = _read(path).decode()
        except OSError as err:
            _fail(f"cannot read {path}: {err.strerror}")
        try:
            return parse_text(text, ignore_dynu)
        except InputError as err:
            _fail(f"failed to load data, aborting: {err}")
    if simulate:
        from herder.alloc.textdata import simulate as simulated_cluster

        try:
            return simulated_cluster(list(simulate))
        except InputError as err:
            _fail(str(err))
    return None


def _apply_mond(cl: Cluster, mond: str, data_path: str | None, xen: bool, ignore_dynu: bool,
                port: int, exit_on_missing: bool) -> None:
    """hail/hbal's MonD step: cpu load from the agents (or a mock file) into ``cl``."""
    if mond != "yes":
        return
    from herder.alloc.mond import MondOptions, apply_mond, parse_mond_data

    data = None
    if data_path is not None:
        try:
            with open(data_path) as fh:
                text = fh.read()
        except OSError as err:
            _fail(f"can't parse MonD data: {data_path}: {err.strerror}")
        try:
            data = parse_mond_data(text)
        except InputError as err:
            _fail(f"can't parse MonD data: {err}")
    opts = MondOptions(enabled=True, data=data, xen=xen, ignore_dynu=ignore_dynu, port=port)
    ok = apply_mond(cl, opts, lambda msg: click.echo(msg, err=True))
    if exit_on_missing and not ok:
        _fail("Not all required data available")


class _MondCommand(click.Command):
    """A command whose bare ``--mond`` means ``--mond=yes`` (getopt's optional argument: a
    following word is never taken as its value)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        for k, arg in enumerate(args):
            if arg == "--":
                out.extend(args[k:])
                break
            out.append("--mond=yes" if arg == "--mond" else arg)
        return super().parse_args(ctx, out)


def _mond_options(func: Any) -> Any:
    """The MonD options shared by ``alloc`` and ``balance``."""
    func = click.option(
        "--mond", type=click.Choice(["yes", "no"]), default="no", metavar="[=yes|no]",
        help="Query every node's monitoring daemon for its cpu load (bare --mond: yes).",
    )(func)
    func = click.option("--mond-data", "mond_data", default=None, metavar="FILE",
                        help="Take MonD reports from FILE ([{node, reports}]) instead.")(func)
    func = click.option("--mond-xen", "mond_xen", is_flag=True,
                        help="Use the per-instance xen-cpu-avg-load collector.")(func)
    func = click.option("--mond-port", "mond_port", type=int, default=ports.MOND, show_default=True,
                        help="The agents' port (herder extension).")(func)
    return func


# Ganeti 3.0's IALLOCATOR_SEARCH_PATH is /usr/local/lib/ganeti/iallocators then this one (where
# Debian's package puts hail); herder's masterd also searches it.
DEFAULT_IALLOCATOR_DIR = "/usr/lib/ganeti/iallocators"
# a model of this many instances is left to the OS when `herder alloc` ends (gcpause)
LEFT_AT_EXIT = 20_000


def iallocator_script(python: str | None = None) -> str:
    """The iallocator script that runs this herder's ``herder alloc``.

    Ganeti (``backend.IAllocatorRunner``) runs ``SCRIPT INPUT_FILE [--param=value...]`` on the
    master node and reads the JSON answer on stdout; every argument goes to ``herder alloc``.
    """
    if python is None and not sys.executable:
        _fail("cannot tell which Python runs herder (sys.executable is empty)")
    # the venv's interpreter as invoked (not resolved: the symlink is what selects the venv)
    py = python or os.path.abspath(sys.executable)
    return ("#!/bin/sh\n"
            "# herder's allocator as a Ganeti iallocator (written by `herder alloc install`).\n"
            "# Ganeti runs: SCRIPT INPUT_FILE [--param=value...] and reads JSON on stdout.\n"
            f"exec {shlex.quote(py)} -m herder.cli.iallocator \"$@\"\n")


def _install(directory: str, name: str, force: bool) -> tuple[str, bool]:
    """Write the script atomically as DIR/NAME (mode 0755); (path, changed)."""
    if not name or "/" in name or name in (".", ".."):
        _fail(f"invalid iallocator name {name!r}: a plain file name is needed")
    if not os.path.isdir(directory):
        _fail(f"no such directory: {directory} (is Ganeti installed here? choose one with --dir)")
    path = os.path.join(directory, name)
    text = iallocator_script()
    if os.path.lexists(path):
        same = False
        if os.path.isfile(path) and not os.path.islink(path):
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    same = fh.read() == text
            except OSError:
                same = False
        if same and (os.stat(path).st_mode & 0o7777) == 0o755:
            return path, False
        if not same and not force:
            _fail(f"{path} exists and is not this herder's script (use --force to replace it)")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), 0o755)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        _fail(f"cannot write {path}: {err.strerror or err}")
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return path, True


@click.command("install", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--dir", "directory", default=DEFAULT_IALLOCATOR_DIR, show_default=True,
              metavar="DIR", help="Where Ganeti looks for iallocators.")
@click.option("--name", default="herder", show_default=True,
              help="The iallocator's name (gnt-instance add -I NAME).")
@click.option("--force", is_flag=True, help="Replace an existing file that differs.")
@click.option("--print", "print_only", is_flag=True,
              help="Print the script on stdout instead of writing it.")
def alloc_install(directory: str, name: str, force: bool, print_only: bool) -> None:
    """Install herder's allocator as Ganeti's iallocator NAME (script DIR/NAME).

    Install it on every master candidate: Ganeti runs iallocators on the master node.
    """
    if print_only:
        click.echo(iallocator_script(), nl=False)
        return
    path, changed = _install(directory, name, force)
    py = os.path.abspath(sys.executable)
    if changed:
        click.echo(f"installed {path}: runs {py} -m herder.cli.iallocator")
    else:
        click.echo(f"{path} is already this herder's script (unchanged)")
    click.echo(f"Use it per job with -I {name} (e.g. gnt-instance add -I {name} ...) "
               "or make it the cluster's default:")
    click.echo(f"  gnt-cluster modify --default-iallocator {name}")


class _AllocCommand(_MondCommand):
    """``herder alloc FILE|-`` plus its ``herder alloc install`` subcommand.

    The request file is a positional argument, so ``alloc`` stays a plain command: a first
    argument ``install`` selects the subcommand (a request file of that name: ``./install``).
    """

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        if args and args[0] == "install":
            name = f"{info_name} install" if info_name else "install"
            return alloc_install.make_context(name, list(args[1:]), parent=parent, **extra)
        return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        if ctx.command is not self:
            return ctx.command.invoke(ctx)
        return super().invoke(ctx)


@click.command("alloc", cls=_AllocCommand,
               context_settings={"help_option_names": ["-h", "--help"]},
               epilog="herder alloc install [--dir DIR] [--name NAME] [--force] [--print]: "
                      "install this command as Ganeti's iallocator (see its --help).")
@click.argument("request", metavar="FILE|-")
@click.option("--ignore-soft-errors", is_flag=True, help="Apply only the hard resource checks.")
@click.option("--no-capacity-checks", is_flag=True, help="Skip the global N+1 check.")
@click.option("--restrict-allocation-to", "restrict", default=None, metavar="N1,N2",
              help="Only place on these nodes (overrides the request's restrict-to-nodes).")
@click.option("--static-kvm-node-memory", type=int, default=4096, show_default=True,
              help="Memory assumed reserved on KVM nodes; 0 uses the reported value.")
@click.option("-t", "--text-data", "text_data", default=None, metavar="FILE",
              help="Take the cluster from an htools text file instead of the request.")
@click.option("--simulate", "--simu", "simulate", multiple=True, metavar="SPEC",
              help="Take the cluster from a simulated spec: policy,count,disk,mem,cpu.")
@click.option("--ignore-dynu", is_flag=True, help="Ignore dynamic utilisation (with -t).")
@click.option("--dry-run", is_flag=True,
              help="Leave the in-memory model untouched (matters with -S).")
@click.option("-S", "--save", "save", default=None, metavar="FILE",
              help="Write the cluster before/after to FILE.pre-ialloc / FILE.post-ialloc.")
@click.option("-p", "print_default", is_flag=True, help="Print node tables to stderr.")
@click.option("--print-nodes", "print_nodes", default=None, metavar="FIELDS",
              help="Print node tables with these fields (e.g. name,pcnt) to stderr.")
@click.option("-v", "--verbose", count=True, help="Accepted for hail compatibility.")
@_mond_options
def alloc(request: str, ignore_soft_errors: bool, no_capacity_checks: bool, restrict: str | None,
          static_kvm_node_memory: int, text_data: str | None, simulate: tuple[str, ...],
          ignore_dynu: bool, dry_run: bool, save: str | None, print_default: bool,
          print_nodes: str | None, verbose: int, mond: str, mond_data: str | None,
          mond_xen: bool, mond_port: int) -> None:
    """Answer an iallocator request (Ganeti protocol version 2) read from FILE or stdin."""
    if print_default and print_nodes is None:
        print_nodes = ""
    from herder.alloc import answer_message
    from herder.alloc.protocol import build_cluster, parse_message

    opts = Options(
        ignore_soft_errors=ignore_soft_errors, capacity_checks=not no_capacity_checks,
        restrict_to=[x for x in restrict.split(",") if x] if restrict is not None else None,
        static_kvm_mem=static_kvm_node_memory, dry_run=dry_run,
    )
    cluster = _text_cluster(text_data, simulate, ignore_dynu)
    try:
        data = _read(request)
    except OSError as err:
        _fail(f"cannot read {request}: {err.strerror}")
    try:
        # the model of a big cluster is hundreds of thousands of containers, none of them cyclic
        with gcpause.paused():
            msg = parse_message(data)
            del data  # the request's bytes (48 MB at 10,000 nodes) are not needed any more
            if cluster is None:
                cluster = build_cluster(msg, opts)
            if mond == "yes":
                _apply_mond(cluster, mond, mond_data, mond_xen, ignore_dynu, mond_port, False)
            _save(cluster, save, "pre-ialloc")
            _print_nodes("Initial cluster status", cluster, cluster.nodes, print_nodes)
            response = answer_message(msg, opts, cluster)
            _print_nodes("Final cluster status", cluster, cluster.nodes, print_nodes)
            _save(cluster, save, "post-ialloc")
    except InputError as err:
        _fail(str(err))
    except OSError as err:
        _fail(f"cannot write {save}: {err.strerror}")
    click.echo(response.to_json())
    if len(cluster.instances) >= LEFT_AT_EXIT:
        # the command ends here: the OS takes a big model back at once, faster than freeing it
        gcpause.left_at_exit(msg, cluster, response)


def _print_nodes(title: str, cl: Cluster, nodes: list[Node], fields: str | None) -> None:
    if fields is None:
        return
    names = [f for f in (fields or "name,pcnt").split(",") if f]
    if names and names[0].startswith("+"):
        names = ["name", "pcnt", *(x.lstrip("+") for x in names)]
    getters = {
        "name": lambda n: n.name, "pcnt": lambda n: str(len(n.plist)),
        "scnt": lambda n: str(len(n.slist)), "fmem": lambda n: str(n.unalloc),
        "fdsk": lambda n: str(n.f_dsk), "tmem": lambda n: str(int(n.t_mem)),
    }
    names = [x for x in names if x in getters]
    heads = {"name": "Name", "pcnt": "pcnt", "scnt": "scnt", "fmem": "f_mem", "fdsk": "f_dsk",
             "tmem": "t_mem"}
    rows = [[heads[x] for x in names]] + [[getters[x](n) for x in names] for n in nodes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(names))]
    click.echo(f"{title}:", err=True)
    for r in rows:
        cells = [c.ljust(w) if names[i] == "name" else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        click.echo(" " + " ".join(cells), err=True)
    click.echo("\n", err=True)


def _load_util(cl: Cluster, path: str) -> None:
    from herder.alloc import hbal

    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as err:
        _fail(f"can't parse utilisation data: {err.strerror}")
    try:
        hbal.apply_util(cl, text)
    except InputError as err:
        _fail(str(err))


def _load_any(text_data: str | None, simulate: tuple[str, ...], request: str | None,
              ignore_dynu: bool) -> Cluster:
    if request:
        from herder.alloc.protocol import build_cluster, parse_message

        try:
            return build_cluster(parse_message(_read(request)), Options())
        except (OSError, InputError) as err:
            _fail(f"failed to load data, aborting: {err}")
    cl = _text_cluster(text_data, simulate, ignore_dynu)
    if cl is None:
        _fail("No input data given (use -t FILE, --simulate or --request FILE).")
    return cl


@click.command("balance", cls=_MondCommand,
               context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-t", "--text-data", "text_data", default=None, metavar="FILE",
              help="The cluster in htools text format.")
@click.option("--request", "request", default=None, metavar="FILE",
              help="The cluster from an iallocator message instead.")
@click.option("--simulate", "simulate", multiple=True, metavar="SPEC")
@click.option("-G", "--group", "group", default=None, help="The node group to balance.")
@click.option("-O", "offline", multiple=True, help="Treat these nodes as offline (comma list).")
@click.option("-l", "--max-length", "max_length", type=int, default=-1,
              help="At most this many moves (-1: no limit).")
@click.option("--min-score", type=float, default=1e-9)
@click.option("-g", "--min-gain", type=float, default=0.01)
@click.option("--min-gain-limit", type=float, default=0.1)
@click.option("--ignore-soft-errors", is_flag=True)
@click.option("--ignore-dynu", is_flag=True)
@click.option("--evac-mode", is_flag=True, help="Only move instances off offline nodes.")
@click.option("--restricted-migration", is_flag=True)
@click.option("--no-disk-moves", is_flag=True)
@click.option("--no-instance-moves", is_flag=True)
@click.option("--exclusion-tags", default=None, help="Comma list of exclusion tag prefixes.")
@click.option("--exclude-instances", default=None)
@click.option("--select-instances", default=None)
@click.option("-U", "util_file", default=None, help="Dynamic utilisation: name cpu mem dsk net.")
@click.option("-C", "--print-commands", "print_commands", is_flag=False, flag_value="-",
              default=None, help="Print the gnt-instance commands (to FILE if given).")
@click.option("-p", "--print-nodes", "print_nodes", is_flag=False, flag_value="",
              default=None, help="Print node tables (fields, e.g. name,pcnt).")
@click.option("-S", "--save", "save", default=None, help="Save the cluster before/after.")
@click.option("-X", "--exec", "execute", is_flag=True, help="Not supported (LUXI only in hbal).")
@click.option("--prio", default=None, help="Accepted for compatibility.")
@click.option("-v", "--verbose", count=True)
@click.option("--print-instances", is_flag=True, help="Accepted for compatibility.")
@click.option("--exit-on-missing-mond-data", "exit_on_missing", is_flag=True,
              help="Fail when MonD data is incomplete.")
@_mond_options
def balance(text_data: str | None, request: str | None, simulate: tuple[str, ...],
            group: str | None, offline: tuple[str, ...], max_length: int, min_score: float,
            min_gain: float, min_gain_limit: float, ignore_soft_errors: bool, ignore_dynu: bool,
            evac_mode: bool, restricted_migration: bool, no_disk_moves: bool,
            no_instance_moves: bool, exclusion_tags: str | None, exclude_instances: str | None,
            select_instances: str | None, util_file: str | None, print_commands: str | None,
            print_nodes: str | None, save: str | None, execute: bool, prio: str | None,
            verbose: int, print_instances: bool, exit_on_missing: bool, mond: str,
            mond_data: str | None, mond_xen: bool, mond_port: int) -> None:
    """Propose the moves that balance a node group (hbal-compatible output)."""
    from herder.alloc import hbal
    from herder.alloc.balance import BalanceOptions

    cl = _load_any(text_data, simulate, request, ignore_dynu)
    try:
        hbal.select_instances(cl, exclusion_tags, exclude_instances, select_instances)
        if util_file:
            _load_util(cl, util_file)
        _apply_mond(cl, mond, mond_data, mond_xen, ignore_dynu, mond_port, exit_on_missing)
        hbal.mark_offline(cl, offline)
        click.echo(f"Loaded {len(cl.nodes)} nodes, {len(cl.instances)} instances")
        view = hbal.pick_group(cl, group)
    except hbal.Aborted as err:
        for line in err.details:
            click.echo(line, err=True)
        _fail(str(err))
    except InputError as err:
        _fail(str(err))
    opts = BalanceOptions(
        max_moves=max_length, min_score=min_score, min_gain=min_gain,
        min_gain_limit=min_gain_limit, ignore_soft_errors=ignore_soft_errors,
        evac_mode=evac_mode, restricted_migration=restricted_migration,
        disk_moves=not no_disk_moves, instance_moves=not no_instance_moves,
    )
    balancer, begin = hbal.start(cl, view, opts)
    _print_start(cl, view, begin, ignore_soft_errors, print_nodes)
    if begin.balanced(min_score):
        click.echo(f"Cluster is already well balanced (initial score {begin.score:.6f},\n"
                   f"optimum score due to N+1 reservations {begin.optimal:.6f},\n"
                   f"minimum score {min_score:e}).")
        click.echo("Nothing to do, exiting")
        return
    _save(cl, save, "original")
    click.echo("Trying to minimize the CV...")
    _, moves = balancer.run()
    _print_moves(cl, moves, begin.score)
    _save(cl, save, "balanced")
    if print_commands is not None:
        text = "\n".join(hbal.command_lines(moves))
        if print_commands in ("-", ""):
            click.echo(text)
        else:
            with open(print_commands, "w") as fh:
                fh.write("#!/bin/sh\n\nset -e\n" + text + "\n")
    _print_nodes("Final cluster status", cl, view.nodes, print_nodes)
    if execute:
        _fail("hbal: Execution of commands possible only on LUXI")


def _print_start(cl: Cluster, view: hbal.GroupView, begin: hbal.Start,
                 ignore_soft_errors: bool, print_nodes: str | None) -> None:
    if view.split:
        click.echo("Found instances belonging to multiple node groups:", err=True)
        for name in view.split:
            click.echo(f"  {name}", err=True)
    click.echo(f"Group size {len(view.nodes)} nodes, {len(view.instances)} instances")
    if view.name is not None:
        click.echo(f"Selected node group: {view.name}")
    click.echo(f"Initial check done: {begin.bad_nodes} bad nodes, {begin.bad_instances} bad "
               "instances.")
    if begin.bad_nodes:
        click.echo("Cluster is not N+1 happy, continuing but no guarantee that the cluster will "
                   "end N+1 happy.")
    if begin.violating and not ignore_soft_errors:
        click.echo(f"The cluster contains {begin.violating} policy-violating nodes.")
        click.echo("Continuing, but the set of moves might be too restricted; consider using "
                   "the --ignore-soft-errors option.")
    _print_nodes("Initial cluster status", cl, view.nodes, print_nodes)
    click.echo(f"Initial score: {begin.score:.8f}")


def _print_moves(cl: Cluster, moves: list[Move], initial: float) -> None:
    iw = max((len(m.instance) for m in moves), default=0)

    def pair(p: int, s: int) -> str:
        return f"{cl.nodes[p].name}:{cl.nodes[s].name}" if s >= 0 else cl.nodes[p].name

    ow = max((len(pair(*m.old)) for m in moves), default=0)
    nw = max((len(pair(*m.new)) for m in moves), default=0)
    for k, mv in enumerate(moves, start=1):
        click.echo(f"  {k:3d}. {mv.instance:<{iw}} {pair(*mv.old):<{ow}} => "
                   f"{pair(*mv.new):<{nw}} {mv.score:12.8f} a={' '.join(mv.actions)}")
    if moves:
        click.echo(f"Cluster score improved from {initial:.8f} to {moves[-1].score:.8f}")
    else:
        click.echo("No solution found")
    click.echo(f"Solution length={len(moves)}")


def _save(cl: Cluster, prefix: str | None, suffix: str) -> None:
    """-S: the cluster in htools' text format as PREFIX.SUFFIX."""
    if prefix:
        from herder.alloc.textdata import serialize

        with open(f"{prefix}.{suffix}", "w") as fh:
            fh.write(serialize(cl))


@click.command("capacity", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-t", "--text-data", "text_data", default=None, metavar="FILE")
@click.option("--request", "request", default=None, metavar="FILE",
              help="The cluster from an iallocator message instead.")
@click.option("--simulate", "--simu", "simulate", multiple=True, metavar="SPEC")
@click.option("--disk-template", default=None)
@click.option("--spindle-use", type=int, default=None)
@click.option("-l", "--max-length", "max_length", type=int, default=None,
              help="Stop after this many instances per mode.")
@click.option("--machine-readable", is_flag=True, help="HTS_* key=value output.")
@click.option("--no-capacity-checks", is_flag=True)
@click.option("--accept-existing-errors", "--accept-existing", "accept_existing", is_flag=True)
@click.option("--independent-groups", is_flag=True)
@click.option("--tiered-alloc", default=None, help="disk,ram,cpu[,spindles] start of tiering.")
@click.option("--standard-alloc", default=None, help="disk,ram,cpu[,spindles] fixed spec.")
@click.option("--ignore-soft-errors", is_flag=True)
@click.option("-p", "--print-nodes", "print_nodes", is_flag=False, flag_value="",
              default=None)
@click.option("-S", "--save", "save", default=None, metavar="PREFIX",
              help="Write the clusters after allocation to PREFIX.tiered / PREFIX.standard.")
@click.option("-v", "--verbose", count=True)
def capacity(text_data: str | None, request: str | None, simulate: tuple[str, ...],
             disk_template: str | None, spindle_use: int | None, max_length: int | None,
             machine_readable: bool, no_capacity_checks: bool, accept_existing: bool,
             independent_groups: bool, tiered_alloc: str | None, standard_alloc: str | None,
             ignore_soft_errors: bool, print_nodes: str | None, save: str | None,
             verbose: int) -> None:
    """How many more instances fit (hspace-compatible output)."""
    from herder.alloc import hspace

    cl0 = _load_any(text_data, simulate, request, False)
    opts = Options(ignore_soft_errors=ignore_soft_errors, capacity_checks=not no_capacity_checks)
    try:
        tiered_spec = hspace.parse_spec(tiered_alloc, "tiered allocation")
        standard_spec = hspace.parse_spec(standard_alloc, "standard allocation")
    except InputError as err:
        _fail(str(err))
    result = hspace.run(cl0, opts, disk_template=disk_template, spindle_use=spindle_use,
                        max_length=max_length, accept_existing=accept_existing,
                        independent_groups=independent_groups, tiered_alloc=tiered_spec,
                        standard_alloc=standard_spec)
    if verbose and result.setup.bad_groups:
        click.echo("Bad groups: ["
                   + ",".join(f'"{g.name}"' for g in result.setup.bad_groups) + "]", err=True)
    _print_nodes("Initial cluster status", cl0, cl0.nodes, print_nodes)
    _print_nodes("Tiered allocation status", result.tiered.cluster, result.tiered.cluster.nodes,
                 print_nodes)
    if save:
        from herder.alloc.textdata import serialize

        for suffix, cl in (("standard", result.standard.cluster),
                           ("tiered", result.tiered.cluster)):
            with open(f"{save}.{suffix}", "w") as fh:
                fh.write(serialize(cl))
    _print_nodes("Standard allocation status", result.standard.cluster,
                 result.standard.cluster.nodes, print_nodes)
    if machine_readable:
        for key, val in hspace.machine_readable(result).items():
            click.echo(f"{key}={val}")
        return
    _print_capacity(result)


def _print_capacity(result: hspace.Hspace) -> None:
    """hspace's human output."""
    from herder.alloc import hspace
    from herder.alloc.capacity import tspec

    total = hspace.Totals.of(result.online)
    click.echo(f"The cluster has {total.nodes} nodes and the following resources:")
    click.echo(f"  MEM {total.mem}, DSK {total.dsk}, CPU {total.cpu}, VCPU {total.vcpu}.")
    ninst = len(result.initial.instances)
    click.echo("There are no initial instances on the cluster." if not ninst
               else f"There are {ninst} initial instances on the cluster.")
    mem, dsk, cpu, _ = result.tiered_specs[0]
    click.echo("Tiered (initial size) instance spec is:")
    click.echo(f"  MEM {mem}, DSK {dsk}, CPU {cpu}, using disk template '{result.template}'.")
    click.echo("Tiered allocation results:")
    if not result.tiered.run.placed:
        click.echo("  - no instances allocated")
    for part in tspec(result.tiered.run.placed).split():
        spec, count = part.split("=")
        m, d, c, _ = spec.split(",")
        click.echo(f"  - {int(count):3d} instances of spec MEM {m}, DSK {d}, CPU {c}")
    _print_mode(result.score, result.tiered)
    std = result.standard_spec
    click.echo("Standard (fixed-size) instance spec is:")
    click.echo(f"  MEM {std[0]}, DSK {std[1]}, CPU {std[2]}, using disk template "
               f"'{result.template}'.")
    click.echo("Normal (fixed-size) allocation results:")
    click.echo(f"  - {len(result.standard.run.placed):3d} instances allocated")
    _print_mode(result.score, result.standard)


def _print_mode(initial: float, mode: hspace.Mode) -> None:
    from herder.alloc import hspace

    click.echo(f"  - most likely failure reason: {hspace.failure_reason(mode.run)}")
    click.echo(f"  - initial cluster score: {initial:.8f}")
    click.echo(f"  -   final cluster score: {mode.score:.8f}")
    memory, disk, vcpu = hspace.efficiency(mode.cluster)
    click.echo(f"  - memory usage efficiency: {memory:5.2f}%")
    click.echo(f"  -   disk usage efficiency: {disk:5.2f}%")
    click.echo(f"  -   vcpu usage efficiency: {vcpu:5.2f}%")
