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
from typing import Any, NoReturn

import click

from herder.alloc.model import Cluster, Node
from herder.alloc.protocol import InputError, Options
from herder.core import gcpause


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
    func = click.option("--mond-port", "mond_port", type=int, default=1815, show_default=True,
                        help="The agents' port (herder extension).")(func)
    return func


# Ganeti 3.0's IALLOCATOR_SEARCH_PATH is /usr/local/lib/ganeti/iallocators then this one (where
# Debian's package puts hail); herder's masterd also searches it.
DEFAULT_IALLOCATOR_DIR = "/usr/lib/ganeti/iallocators"


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
            _save(save, "pre-ialloc", cluster)
            _print_nodes("Initial cluster status", cluster, cluster.nodes, print_nodes)
            response = answer_message(msg, opts, cluster)
            _print_nodes("Final cluster status", cluster, cluster.nodes, print_nodes)
            _save(save, "post-ialloc", cluster)
    except InputError as err:
        _fail(str(err))
    except OSError as err:
        _fail(f"cannot write {save}: {err.strerror}")
    click.echo(response.to_json())


def _save(save: str | None, suffix: str, cluster: Cluster) -> None:
    """The cluster in htools' text format to ``SAVE.suffix`` (``-S``)."""
    if save:
        from herder.alloc.textdata import serialize

        with open(f"{save}.{suffix}", "w") as fh:
            fh.write(serialize(cluster))


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
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as err:
        _fail(f"can't parse utilisation data: {err.strerror}")
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 5:
            _fail(f"can't parse utilisation data: Cannot parse line {line}")
        name, *vals = parts
        nums = []
        for v in vals:
            try:
                nums.append(float(v))
            except ValueError:
                _fail(f"can't parse utilisation data: {name}: cannot parse string '{v}'")
        idx = cl.inst_by_name.get(name)
        if idx is not None:
            inst = cl.instances[idx]
            inst.util = (nums[0], nums[1], nums[2], nums[3])
    # rebuild the node load figures from the instances
    for n in cl.nodes:
        n.load = [0.0, 0.0, 0.0, 0.0]
    for inst in cl.instances:
        p = cl.nodes[inst.pnode]
        for k in range(4):
            p.load[k] += inst.util[k]
        if inst.snode >= 0:
            cl.nodes[inst.snode].load[2] += inst.util[2]


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
    from herder.alloc.balance import (
        BalanceOptions,
        Balancer,
        job_sets,
        move_commands,
        n1_bad,
        optimal_score,
        policy_violating_nodes,
    )
    from herder.alloc.textdata import serialize

    cl = _load_any(text_data, simulate, request, ignore_dynu)
    if exclusion_tags:
        prefixes = tuple(p + ":" for p in exclusion_tags.split(",") if p)
        cl.excl_prefixes = cl.excl_prefixes + prefixes
        _reindex_tags(cl)
    for arg in (exclude_instances, select_instances):
        if arg:
            unknown = [x for x in arg.split(",") if x not in cl.inst_by_name]
            if unknown:
                _fail("failed to load data, aborting: Unknown instance(s): "
                      + "[" + ",".join(f'"{x}"' for x in unknown) + "]")
    if exclude_instances:
        for name in exclude_instances.split(","):
            cl.instances[cl.inst_by_name[name]].movable = False
    if select_instances:
        chosen = set(select_instances.split(","))
        for inst in cl.instances:
            if inst.name not in chosen:
                inst.movable = False
    if util_file:
        _load_util(cl, util_file)
    _apply_mond(cl, mond, mond_data, mond_xen, ignore_dynu, mond_port, exit_on_missing)
    for spec in offline:
        for name in spec.split(","):
            if name not in cl.node_by_name:
                _fail(f"Unknown node '{name}'")
            cl.nodes[cl.node_by_name[name]].offline = True
    click.echo(f"Loaded {len(cl.nodes)} nodes, {len(cl.instances)} instances")
    present = sorted({n.group for n in cl.nodes})
    if group is None:
        if len(present) > 1:
            click.echo("Found multiple node groups:", err=True)
            for g in present:
                click.echo(f"  {cl.groups[g].name}", err=True)
            _fail("Aborting.")
        gobj = cl.groups[present[0]] if present else None
    else:
        gobj = cl.group_named(group)
        if gobj is None:
            click.echo(f"No such node group '{group}'", err=True)
            _fail("Aborting.")
    gidx = gobj.idx if gobj is not None else -1
    split = [i.name for i in cl.instances
             if i.snode >= 0 and cl.nodes[i.pnode].group != cl.nodes[i.snode].group]
    if split:
        click.echo("Found instances belonging to multiple node groups:", err=True)
        for name in split:
            click.echo(f"  {name}", err=True)
    nodes = [n for n in cl.nodes if n.group == gidx]
    insts = [i for i in cl.instances if i.pnode >= 0 and cl.nodes[i.pnode].group == gidx]
    for inst in insts:
        if inst.snode >= 0 and cl.nodes[inst.snode].group != gidx:
            inst.movable = False
    click.echo(f"Group size {len(nodes)} nodes, {len(insts)} instances")
    if gobj is not None:
        click.echo(f"Selected node group: {gobj.name}")
    bad_nodes, bad_insts = n1_bad(cl, nodes)
    click.echo(f"Initial check done: {bad_nodes} bad nodes, {bad_insts} bad instances.")
    if bad_nodes:
        click.echo("Cluster is not N+1 happy, continuing but no guarantee that the cluster will "
                   "end N+1 happy.")
    violating = policy_violating_nodes(nodes)
    if violating and not ignore_soft_errors:
        click.echo(f"The cluster contains {violating} policy-violating nodes.")
        click.echo("Continuing, but the set of moves might be too restricted; consider using "
                   "the --ignore-soft-errors option.")
    _print_nodes("Initial cluster status", cl, nodes, print_nodes)
    opts = BalanceOptions(
        max_moves=max_length, min_score=min_score, min_gain=min_gain,
        min_gain_limit=min_gain_limit, ignore_soft_errors=ignore_soft_errors,
        evac_mode=evac_mode, restricted_migration=restricted_migration,
        disk_moves=not no_disk_moves, instance_moves=not no_instance_moves,
    )
    bal = Balancer(cl, gidx, opts)
    ini = bal.score()
    click.echo(f"Initial score: {ini:.8f}")
    optimal = optimal_score(nodes)
    if ini - optimal < min_score:
        click.echo(f"Cluster is already well balanced (initial score {ini:.6f},\n"
                   f"optimum score due to N+1 reservations {optimal:.6f},\n"
                   f"minimum score {min_score:e}).")
        click.echo("Nothing to do, exiting")
        return
    if save:
        with open(f"{save}.original", "w") as fh:
            fh.write(serialize(cl))
    click.echo("Trying to minimize the CV...")
    _, moves = bal.run()
    iw = max((len(m.instance) for m in moves), default=0)

    def pair(p: int, s: int) -> str:
        return f"{cl.nodes[p].name}:{cl.nodes[s].name}" if s >= 0 else cl.nodes[p].name

    ow = max((len(pair(*m.old)) for m in moves), default=0)
    nw = max((len(pair(*m.new)) for m in moves), default=0)
    for k, mv in enumerate(moves, start=1):
        click.echo(f"  {k:3d}. {mv.instance:<{iw}} {pair(*mv.old):<{ow}} => "
                   f"{pair(*mv.new):<{nw}} {mv.score:12.8f} a={' '.join(mv.actions)}")
    if moves:
        click.echo(f"Cluster score improved from {ini:.8f} to {moves[-1].score:.8f}")
    else:
        click.echo("No solution found")
    click.echo(f"Solution length={len(moves)}")
    if save:
        with open(f"{save}.balanced", "w") as fh:
            fh.write(serialize(cl))
    if print_commands is not None:
        lines = ["", "Commands to run to reach the above solution:"]
        for js, jobs in enumerate(job_sets(moves), start=1):
            lines.append("  ")
            lines.append(f"  echo jobset {js}, {len(jobs)} jobs")
            for jn, mv in enumerate(jobs, start=1):
                lines.append(f"    echo job {js}/{jn}")
                lines.extend("    " + c for c in move_commands(mv))
        text = "\n".join(lines)
        if print_commands in ("-", ""):
            click.echo(text)
        else:
            with open(print_commands, "w") as fh:
                fh.write("#!/bin/sh\n\nset -e\n" + text + "\n")
    _print_nodes("Final cluster status", cl, nodes, print_nodes)
    if execute:
        _fail("hbal: Execution of commands possible only on LUXI")


def _reindex_tags(cl: Cluster) -> None:
    """Recompute exclusion tags (after --exclusion-tags) and the nodes' tag counts."""
    for inst in cl.instances:
        cl.prepare_instance(inst)
    for n in cl.nodes:
        n.ptags = {}
        n.inst_map = {}
    for inst in cl.instances:
        p = cl.nodes[inst.pnode]
        for tag in inst.excl_tags:
            p.ptags[tag] = p.ptags.get(tag, 0) + 1
            for loc in p.loc_tags:
                p.inst_map[(loc, tag)] = p.inst_map.get((loc, tag), 0) + 1


def _spec_arg(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    from herder.alloc.textdata import _size

    parts = text.split(",")
    if len(parts) not in (3, 4):
        _fail(f"Invalid {what} specification '{text}' (disk,ram,cpu[,spindles])")
    try:
        return [_size(parts[0]), _size(parts[1]), *(int(p) for p in parts[2:])]
    except (InputError, ValueError):
        _fail(f"Invalid {what} specification '{text}'")
    return None


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
    from herder.alloc.capacity import (
        Capacity,
        CapacityRun,
        prepare,
        spec_instance,
        tspec,
    )
    from herder.alloc.metrics import Stats

    cl0 = _load_any(text_data, simulate, request, False)
    opts = Options(ignore_soft_errors=ignore_soft_errors, capacity_checks=not no_capacity_checks)
    pol = cl0.ipolicy
    template = disk_template or (pol.disk_templates[0] if pol.disk_templates else "plain")
    su_std = spindle_use if spindle_use is not None else pol.std.spindle_use
    setup = prepare(cl0, opts, accept_existing, independent_groups)
    if verbose and setup.bad_groups:
        click.echo("Bad groups: [" + ",".join(f'"{g.name}"' for g in setup.bad_groups) + "]",
                   err=True)
    online = [n for n in cl0.nodes if not n.offline]
    ini_score = Stats(cl0.nodes).score()
    _print_nodes("Initial cluster status", cl0, cl0.nodes, print_nodes)

    # tiered
    tiered_specs = []
    targ = _spec_arg(tiered_alloc, "tiered allocation")
    if targ is not None:
        tiered_specs.append((targ[1], targ[0], targ[2], targ[3] if len(targ) > 3 else su_std))
    else:
        tiered_specs = [(hi.memory, hi.disk_size, hi.cpus, hi.spindle_use) for _, hi in pol.minmax]
    cl_t = cl0.copy()
    cap_t = Capacity(cl_t, prepare(cl_t, opts, accept_existing, independent_groups), opts)
    trun = CapacityRun()
    for mem, dsk, cpu, spn in tiered_specs:
        trun.stopped_by_limit = False
        cap_t.tiered(spec_instance("", mem, dsk, cpu, spn, template, su_std), max_length,
                     trun)
    trl_score = Stats(cl_t.nodes).score()
    _print_nodes("Tiered allocation status", cl_t, cl_t.nodes, print_nodes)

    # standard
    sarg = _spec_arg(standard_alloc, "standard allocation")
    if sarg is not None:
        std = (sarg[1], sarg[0], sarg[2], sarg[3] if len(sarg) > 3 else su_std)
    else:
        std = (pol.std.memory, pol.std.disk_size, pol.std.cpus, su_std)
    cl_s = cl0.copy()
    cap_s = Capacity(cl_s, prepare(cl_s, opts, accept_existing, independent_groups), opts)
    srun = CapacityRun()
    cap_s.iterate(spec_instance("", *std, template, su_std), max_length, srun)
    fin_score = Stats(cl_s.nodes).score()
    if save:
        from herder.alloc.textdata import serialize

        for suffix, cl in (("standard", cl_s), ("tiered", cl_t)):
            with open(f"{save}.{suffix}", "w") as fh:
                fh.write(serialize(cl))
    _print_nodes("Standard allocation status", cl_s, cl_s.nodes, print_nodes)

    def reason(run: CapacityRun) -> str:
        if not run.fails:
            return "FailMem"
        return max(sorted(run.fails), key=lambda f: run.fails[f]).label

    def res(cl: Cluster, prefix: str) -> dict[str, object]:
        on = [n for n in cl.nodes if not n.offline]
        placed = [i for i in cl.instances if i.pnode >= 0]
        return {
            f"{prefix}_INST_CNT": len(placed),
            f"{prefix}_MEM_FREE": sum(n.unalloc for n in on),
            f"{prefix}_MEM_AVAIL": sum(n.avail_mem for n in on),
            f"{prefix}_MEM_RESVD": sum(n.r_mem for n in on),
            f"{prefix}_DSK_FREE": sum(n.f_dsk for n in on),
            f"{prefix}_SPN_FREE": sum(n.f_spindles for n in on),
            f"{prefix}_CPU_INST": sum(n.u_cpu for n in on),
        }

    total_mem = int(sum(n.t_mem for n in online))
    total_dsk = int(sum(n.t_dsk for n in online))
    total_cpu = int(sum(n.t_cpu for n in online))
    if machine_readable:
        out: dict[str, object] = {
            "HTS_CLUSTER_MEM": total_mem, "HTS_CLUSTER_DSK": total_dsk,
            "HTS_CLUSTER_CPU": total_cpu,
            "HTS_CLUSTER_VCPU": int(sum(n.t_cpu * n.vcpu_ratio for n in online)),
            "HTS_CLUSTER_NODES": len(online), "HTS_INI_SCORE": f"{ini_score:.8f}",
        }
        out.update(res(cl0, "HTS_INI"))
        mem, dsk, cpu, spn = tiered_specs[0]
        out.update({"HTS_TSPEC_INI_MEM": mem, "HTS_TSPEC_INI_DSK": dsk, "HTS_TSPEC_INI_CPU": cpu,
                    "HTS_TSPEC_INI_SPN": spn, "HTS_TSPEC_INI_DISK_TEMPLATE": template,
                    "HTS_TRL_SCORE": f"{trl_score:.8f}"})
        out.update(res(cl_t, "HTS_TRL"))
        out["HTS_TSPEC"] = f"'{tspec(trun.placed)}'"
        out.update({"HTS_SPEC_MEM": std[0], "HTS_SPEC_DSK": std[1], "HTS_SPEC_CPU": std[2],
                    "HTS_SPEC_SPN": std[3], "HTS_SPEC_DISK_TEMPLATE": template,
                    "HTS_FIN_SCORE": f"{fin_score:.8f}"})
        out.update(res(cl_s, "HTS_FIN"))
        out["HTS_ALLOC_INSTANCES"] = len(srun.placed)
        out["HTS_ALLOC_FAIL_REASON"] = reason(srun).upper()
        from herder.alloc.model import Fail

        for f in Fail:
            out[f"HTS_ALLOC_{f.label.upper()}_CNT"] = srun.fails.get(f, 0)
        out["HTS_OK"] = 1
        for key, val in out.items():
            click.echo(f"{key}={val}")
        return
    vcpus = int(sum(n.t_cpu * n.vcpu_ratio for n in online))
    click.echo(f"The cluster has {len(online)} nodes and the following resources:")
    click.echo(f"  MEM {total_mem}, DSK {total_dsk}, CPU {total_cpu}, VCPU {vcpus}.")
    ninst = len(cl0.instances)
    click.echo("There are no initial instances on the cluster." if not ninst
               else f"There are {ninst} initial instances on the cluster.")

    def eff(cl: Cluster) -> list[str]:
        on = [n for n in cl.nodes if not n.offline]
        tm = sum(n.t_mem for n in on) or 1
        td = sum(n.t_dsk for n in on) or 1
        tv = sum(n.t_cpu * n.vcpu_ratio for n in on) or 1
        im = sum(i.mem for i in cl.instances if i.pnode >= 0 and i.uses_memory)
        idk = sum(i.dsk * (2 if i.snode >= 0 else 1) for i in cl.instances
                  if i.pnode >= 0 and i.local)
        iv = sum(n.u_cpu for n in on)
        return [f"  - memory usage efficiency: {100 * im / tm:5.2f}%",
                f"  -   disk usage efficiency: {100 * idk / td:5.2f}%",
                f"  -   vcpu usage efficiency: {100 * iv / tv:5.2f}%"]

    mem, dsk, cpu, spn = tiered_specs[0]
    click.echo("Tiered (initial size) instance spec is:")
    click.echo(f"  MEM {mem}, DSK {dsk}, CPU {cpu}, using disk template '{template}'.")
    click.echo("Tiered allocation results:")
    if not trun.placed:
        click.echo("  - no instances allocated")
    for part in tspec(trun.placed).split():
        spec, count = part.split("=")
        m, d, c, _ = spec.split(",")
        click.echo(f"  - {int(count):3d} instances of spec MEM {m}, DSK {d}, CPU {c}")
    click.echo(f"  - most likely failure reason: {reason(trun)}")
    click.echo(f"  - initial cluster score: {ini_score:.8f}")
    click.echo(f"  -   final cluster score: {trl_score:.8f}")
    for line in eff(cl_t):
        click.echo(line)
    click.echo("Standard (fixed-size) instance spec is:")
    click.echo(f"  MEM {std[0]}, DSK {std[1]}, CPU {std[2]}, using disk template '{template}'.")
    click.echo("Normal (fixed-size) allocation results:")
    click.echo(f"  - {len(srun.placed):3d} instances allocated")
    click.echo(f"  - most likely failure reason: {reason(srun)}")
    click.echo(f"  - initial cluster score: {ini_score:.8f}")
    click.echo(f"  -   final cluster score: {fin_score:.8f}")
    for line in eff(cl_s):
        click.echo(line)
