"""`herder masterd`: run the master daemon (config, job queue, Ganeti RAPI v2 on port 5080)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from herder.cli.common import TIMESPEC
from herder.core import faults, ports, serve
from herder.core.store import default_config_path, is_etcd_location
from herder.masterd import heap
from herder.masterd.daemon import (
    EXIT_LEASE_LOST,
    EXIT_NOTMASTER,
    MasterDaemon,
    MasterSettings,
    NotMaster,
)


@click.command()
@click.option("--bind", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=ports.MASTERD, show_default=True,
              help="TCP port (0: any free port, printed at start).")
@click.option("--workers", type=click.IntRange(1, 256), default=8, show_default=True,
              help="Job queue worker threads (jobs that do not conflict run in parallel).")
@click.option("--anonymous-reads", is_flag=True,
              help="Allow GET requests without credentials whatever the cluster's setting "
              "(`cluster modify --rapi-anonymous-reads`) says; writes always need a user.")
@click.option("--no-tls", is_flag=True, help="Plain HTTP (tests on loopback only).")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/run/herder"), show_default=True, help="Where the pid file goes.")
@click.option("--noded-port", type=click.IntRange(1, 65535), default=ports.NODED, show_default=True,
              help="Port of the node daemons.")
@click.option("--iallocator-path", multiple=True, type=click.Path(path_type=Path),
              help="Where to look for iallocator scripts (repeatable; Ganeti's defaults).")
@click.option("--node", "node_name", help="This node's name (default: FQDN); masterd exits with "
              "code 11 unless it is the config's master.")
@click.option("--lease-ttl", type=click.IntRange(2, 3600),
              help="etcd backend: TTL of the master lease in seconds (a dead master is replaced "
              "within about this long); default: the cluster's setting, `herder cluster modify "
              "--master-lease-ttl` (10 s).")
@click.option("--local-dir", type=click.Path(file_okay=False, path_type=Path),
              help="etcd backend: the directory of the cluster secrets (default /var/lib/herder).")
@click.option("--job-age", type=TIMESPEC, default="6h", show_default=True,
              help="Archive finished jobs this long after they ended, as Ganeti's watcher does "
              "(seconds, or with s/m/h/d/w; 0: never).")
@click.option("--debug", is_flag=True, help="Log at debug level.")
@click.pass_context
def masterd(ctx: click.Context, bind: str, port: int, workers: int, anonymous_reads: bool,
            no_tls: bool, run_dir: Path, noded_port: int, iallocator_path: tuple[Path, ...],
            node_name: str | None, lease_ttl: int | None, local_dir: Path | None, job_age: int,
            debug: bool) -> None:
    """The master daemon: owns the cluster config and the job queue, serves Ganeti's RAPI v2.

    Runs in the foreground until SIGTERM/SIGINT. HTTPS with the cluster certificate
    (server.pem beside the config); users and passwords from rapi_users beside the config
    (`user password write`). Jobs survive a restart: queued ones run, ones that were running are
    marked failed with the reason.

    Only the master runs it: exit code 11 when this node (--node, default FQDN) is not the
    config's master, and later once a master failover moved the master or its epoch on (every
    node RPC carries the epoch; nodes refuse an older one).

    With the etcd backend (--config / HERDER_CONFIG etcds://HOST:PORT,.../CLUSTER) every node may
    run it: it waits as a standby, without RAPI, until it holds the master lease (--lease-ttl),
    then makes itself the config's master and serves; exit code 75 once the lease is lost (its
    supervisor restarts it, a standby again); exit code 11 on a node that is not in the config.

    \b
    Finished jobs older than --job-age are archived every 5 minutes (Ganeti's watcher).

    \b
    Routes (Ganeti RAPI v2 subset): /2/info /2/nodes[?bulk=1] /2/nodes/NODE[/role|/modify|
      /evacuate|/migrate|/tags] /2/instances[...] /2/groups[...] /2/jobs[/ID[/wait]] /2/tags
      /2/filters[/UUID] /2/modify; herder extensions under /2/herder/ (jobs, queue,
      maintenance).
    """
    faults.enable()  # a fatal signal leaves a traceback (core.faults)
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    location = (ctx.find_root().obj or {}).get("config_path") or default_config_path()
    etcd = is_etcd_location(str(location))
    config_path: Path | str = str(location) if etcd else Path(location)
    try:
        daemon = MasterDaemon(MasterSettings(config_path=config_path, bind=bind, port=port,
                                             workers=workers, anonymous_reads=anonymous_reads,
                                             tls=not no_tls, run_dir=run_dir,
                                             noded_port=noded_port,
                                             iallocator_path=iallocator_path,
                                             node_name=node_name, lease_ttl=lease_ttl,
                                             local_dir=local_dir, job_age=job_age))
    except NotMaster as err:
        click.echo(f"herder masterd: {err}", err=True)
        sys.exit(EXIT_NOTMASTER)
    recovered = daemon.recovered
    if recovered["failed"] or recovered["requeued"] or recovered["canceled"]:
        click.echo(f"herder masterd: recovered jobs: requeued {recovered['requeued']}, "
                   f"failed (were running) {recovered['failed']}, "
                   f"canceled {recovered['canceled']}", err=True)

    scheme = "http" if no_tls else "https"

    def ready(bound: int) -> None:
        click.echo(f"herder masterd: serving RAPI on {scheme}://{bind}:{bound}/ "
                   f"(config {config_path})", err=True)

    if etcd:
        from herder.masterd.etcd_master import candidacy_problem

        waiting = candidacy_problem(daemon.store.snapshot(), daemon.me)
        doing = ("campaigning for" if waiting is None else
                 f"not campaigning ({waiting}) until it is one, for")
        click.echo(f"herder masterd: standby, {doing} the master lease of {config_path}"
                   f" as {daemon.me} (ttl {daemon.lease.ttl if daemon.lease else lease_ttl} s)",
                   err=True)
    serve.run(lambda stop: daemon.serve(ready=ready, stop=stop))
    heap.stop()  # no call into libc through ctypes while the interpreter tears down
    if daemon.deposed is not None:
        click.echo(f"herder masterd: no longer the master: {daemon.deposed}", err=True)
        # on etcd every candidate stays a standby: the supervisor restarts this one as such
        sys.exit(EXIT_LEASE_LOST if etcd else EXIT_NOTMASTER)
