"""`herder cluster upgrade --to VERSION | --resume`: a rolling upgrade of herder on every node, as
Ganeti's `gnt-cluster upgrade` (docs/install.md "Upgrading", docs/compat.md S6).

The operator first installs the new build beside the old one on every node
(`<prefix>/versions/<version>`, `herder.core.install_layout`). Then, on the master:

1. every online node must answer and have the build installed (Ganeti's
   `_VerifyVersionInstalled`); otherwise nothing happens;
2. the intent is written (`<config dir>/upgrade-intent.json`: from, to, who), then the job queue
   drained and the running jobs awaited, and maintd stopped on the master (Ganeti pauses its
   watcher): a node whose daemons restart must not be taken for a failed one and fenced;
3. node by node, the master last: its daemons stop, its `current` link moves to the new build,
   they start again (`herder daemon-util switch-version`, run by the node's noded in a process
   of its own; on the master by this command); the node must then answer with the new build.
   libvirtd and the guests' QEMU processes are never stopped: noded finds its domains again;
4. masterd answers again (the new build), maintd starts again (the new build), the queue is
   undrained, the intent removed.

As in Ganeti, a failure before the first node switched rolls back (queue undrained, maintd
started again, intent removed); from the first switch on (Ganeti's point of no return, its
config change) the upgrade is pushed through: a node that does not come back is one error
naming it, the intent stays, and `--resume` (or `--to` with the same version) goes on from
where it stopped (nodes already on the new build are left as they are). `--to` another
version while an upgrade is under way is refused. Going back to the old build is the same
command with `--to OLD` (the old build is still installed).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click
import msgspec

from herder.cli import remote
from herder.cli.common import config_directory, store_from
from herder.core import master_daemons, model, ports
from herder.core.errors import HerderError
from herder.core.noderpc import HttpNodeRpc
from herder.core.rpcdefs import upgrade_calls
from herder.core.store import atomic_write

INTENT_FILE = "upgrade-intent.json"
ACTIVE_JOBS = ("running", "waiting", "canceling")  # queued jobs wait behind the drain
POLL = 1.0
SWITCH_TIMEOUT = 300.0  # the master's own switch-version (stops and starts its daemons)

Say = Callable[[str], None]


class Intent(msgspec.Struct, kw_only=True):
    """Ganeti's intent-to-upgrade file (from, to, pid), and the nodes switched so far."""

    from_version: str
    to_version: str
    pid: int
    started: float
    switched: list[str] = []
    maintd: bool = False  # maintd ran on the master before: started again at the end


class UpgradeFailed(HerderError):
    """The upgrade stopped; the message says where and what to do."""


def intent_path(directory: Path) -> Path:
    return directory / INTENT_FILE


def read_intent(path: Path) -> Intent | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=Intent)
    except FileNotFoundError:
        return None
    except msgspec.DecodeError as err:
        raise HerderError(f"{path}: not an upgrade intent ({err}); remove it if no upgrade "
                          "is under way") from None


def write_intent(path: Path, intent: Intent) -> None:
    atomic_write(path, msgspec.json.encode(intent), 0o600)


class Upgrade:
    def __init__(self, ctx: click.Context, rpc: HttpNodeRpc, config: model.ConfigData,
                 intent_file: Path, *, node_timeout: float, queue_timeout: float,
                 say: Say) -> None:
        self.ctx = ctx
        self.rpc = rpc
        self.intent_file = intent_file
        self.node_timeout = node_timeout
        self.queue_timeout = queue_timeout
        self.say = say
        master = config.cluster.master_node
        online = sorted((n for n in config.nodes.values() if not n.offline),
                        key=lambda n: n.name)
        # the master last (Ganeti's _VerifyCommandRaw): masterd serves the drain until then
        self.nodes = [n for n in online if n.uuid != master] + \
            [n for n in online if n.uuid == master]
        self.master = config.nodes[master]

    # --- the nodes ----------------------------------------------------------------------------

    def check(self, node: model.Node, version: str) -> upgrade_calls.VersionsAnswer:
        return self.rpc.call(node, upgrade_calls.UpgradeCheck(version=version))

    def check_all(self, version: str) -> dict[str, upgrade_calls.VersionsAnswer]:
        """Every online node answers and has `version` installed; else one error naming the
        nodes and why (Ganeti: "Ganeti version X not installed on nodes ...")."""
        answers: dict[str, upgrade_calls.VersionsAnswer] = {}
        problems: list[str] = []
        for node in self.nodes:
            try:
                answer = self.check(node, version)
            except HerderError as err:
                problems.append(f"{node.name}: noded does not answer ({err}); start its "
                                "daemons there (herder daemon-util start noded)")
                continue
            answers[node.name] = answer
            if answer.prefix is None:
                problems.append(f"{node.name}: noded runs herder {answer.running} outside a "
                                "versioned install (<prefix>/versions/<version>)")
            elif not answer.installed:
                problems.append(f"{node.name}: herder {version} is not installed "
                                f"({answer.prefix}/versions/{version})")
        if problems:
            raise UpgradeFailed("cannot upgrade to herder " + version + ":\n  " +
                                "\n  ".join(problems))
        return answers

    def switch(self, node: model.Node, answer: upgrade_calls.VersionsAnswer,
               version: str) -> None:
        """One node's daemons onto `version`, and back answering with it."""
        if node.uuid == self.master.uuid:
            # this command runs here: the master's daemons (masterd, maintd among them) stop
            # and start under it; its output is this command's
            argv = [sys.executable, "-m", "herder.cli.main", "daemon-util", "switch-version",
                    "--prefix", str(answer.prefix), version]
            try:
                done = subprocess.run(argv, capture_output=True, text=True,
                                      timeout=SWITCH_TIMEOUT, check=False)
            except subprocess.TimeoutExpired:
                raise UpgradeFailed(f"{node.name}: switch-version did not finish within "
                                    f"{SWITCH_TIMEOUT:g}s") from None
            for line in done.stdout.splitlines():
                self.say(f"  {line}")
            if done.returncode != 0:
                raise UpgradeFailed(f"{node.name}: switch-version failed: "
                                    f"{(done.stderr or done.stdout).strip()[-400:]}")
        else:
            self.say(f"  {self.rpc.call(node, upgrade_calls.UpgradeSwitch(version=version))}")
        self.wait_back(node, version)

    def wait_back(self, node: model.Node, version: str) -> None:
        deadline = time.monotonic() + self.node_timeout
        last = "no answer yet"
        while True:
            try:
                answer = self.check(node, version)
                if answer.running == version:
                    return
                last = f"it still runs herder {answer.running}"
            except HerderError as err:
                last = f"noded does not answer: {err}"
            if time.monotonic() > deadline:
                raise UpgradeFailed(
                    f"{node.name} did not come back with herder {version} within "
                    f"{self.node_timeout:g}s ({last}). Its daemons' logs and "
                    f"/var/log/herder/upgrade.log there say why; once it runs, "
                    f"`herder cluster upgrade --resume` goes on (the intent is kept in "
                    f"{self.intent_file})")
            time.sleep(POLL)

    # --- the queue ----------------------------------------------------------------------------

    def set_drained(self, drained: bool) -> None:
        with remote.masterd_client(self.ctx) as api:
            remote.call(api.set_queue_drained, drained)

    def wait_for_jobs(self) -> None:
        deadline = time.monotonic() + self.queue_timeout
        while True:
            with remote.masterd_client(self.ctx) as api:
                counts = remote.call(api.get_queue).get("jobs") or {}
            active = {s: n for s, n in counts.items() if s in ACTIVE_JOBS and n}
            if not active:
                return
            if time.monotonic() > deadline:
                raise UpgradeFailed("the job queue did not empty within "
                                    f"{self.queue_timeout:g}s ({active})")
            time.sleep(POLL)

    # --- maintd, on the master (this host) ------------------------------------------------------

    @staticmethod
    def maintd_runs() -> bool:
        try:
            master_daemons.daemon_util("check", "maintd", timeout=60)
        except master_daemons.RoleFailure:
            return False
        return True

    def pause_maintd(self) -> None:
        if self.maintd_runs():
            self.say("Stopping maintd for the upgrade (no repairs, no fencing meanwhile)")
            master_daemons.daemon_util("stop", "maintd")

    def resume_maintd(self) -> None:
        self.say("Starting maintd again")
        master_daemons.daemon_util("start", "maintd")

    def wait_masterd(self) -> None:
        deadline = time.monotonic() + self.node_timeout
        while True:
            try:
                with remote.masterd_client(self.ctx) as api:
                    remote.call(api.get_queue)
                return
            except HerderError as err:
                if time.monotonic() > deadline:
                    raise UpgradeFailed(f"masterd does not answer after the master's switch "
                                        f"({err}); start it, then run `herder cluster "
                                        "upgrade --resume`") from None
            time.sleep(POLL)


def run(ctx: click.Context, to_version: str | None, resume: bool, *, noded_port: int,
        node_timeout: float, queue_timeout: float, say: Say) -> None:
    from herder.core.install_layout import check_version
    from herder.masterd import cluster_init, failover

    if (to_version is None) == (not resume):
        raise HerderError("give exactly one of --to VERSION and --resume")
    store = store_from(ctx)
    if not store.exists():
        raise HerderError(f"no cluster config at {store.path}: run it on the master")
    path = intent_path(config_directory(ctx))
    intent = read_intent(path)
    if to_version is not None:
        check_version(to_version)
        if intent is not None and intent.to_version != to_version:
            raise HerderError(f"an upgrade from herder {intent.from_version} to "
                              f"{intent.to_version} is under way; finish it first with "
                              "--resume")
        if intent is not None:
            say(f"An upgrade to herder {to_version} is under way: resuming it")
    elif intent is None:
        say("No upgrade is under way")
        return
    target = intent.to_version if intent is not None else str(to_version)
    config = store.load()
    master = config.node_name(config.cluster.master_node)
    if cluster_init.local_fqdn() != master:  # Ganeti's ssconf.CheckMaster
        raise HerderError(f"this is not the master: run it on the master, {master}")
    rpc = failover.vote_rpc(store, config.cluster.master_epoch, noded_port, timeout=30.0)
    up = Upgrade(ctx, rpc, config, path, node_timeout=node_timeout,
                 queue_timeout=queue_timeout, say=say)

    say(f"Checking that herder {target} is installed on {len(up.nodes)} nodes")
    answers = up.check_all(target)  # nothing changed yet: an error leaves all as it was
    if intent is None:
        intent = Intent(from_version=answers[up.master.name].running, to_version=target,
                        pid=os.getpid(), started=time.time(), maintd=up.maintd_runs())
    intent.pid = os.getpid()
    write_intent(path, intent)

    say("Draining the job queue")
    try:
        up.set_drained(True)
        say("Waiting for the running jobs")
        up.wait_for_jobs()
        up.pause_maintd()
    except HerderError as err:
        if not intent.switched:  # before the point of no return: roll back (Ganeti's)
            with contextlib.suppress(HerderError):
                up.set_drained(False)
            if intent.maintd and not up.maintd_runs():
                with contextlib.suppress(HerderError):
                    up.resume_maintd()
            path.unlink(missing_ok=True)
            raise UpgradeFailed(f"{err}; nothing was switched, the queue takes jobs "
                                "again") from None
        # resuming past the point of no return: masterd may be the one that stopped
        say(f"WARNING: {err}; going on with the nodes")

    for node in up.nodes:
        answer = answers[node.name]
        if answer.running == target and answer.current == target:
            say(f"{node.name}: runs herder {target} already")
        else:
            say(f"{node.name}: herder {answer.running} -> {target}")
            up.switch(node, answer, target)
            say(f"{node.name}: answers with herder {target}")
        if node.name not in intent.switched:
            intent.switched.append(node.name)
            write_intent(path, intent)

    up.wait_masterd()
    if intent.maintd:
        up.resume_maintd()
    say("Undraining the job queue")
    up.set_drained(False)
    path.unlink(missing_ok=True)
    say(f"The cluster runs herder {target} on every node (was {intent.from_version})")


@click.command("upgrade")
@click.option("--to", "to_version", metavar="VERSION",
              help="The build to run (installed as <prefix>/versions/VERSION on every node).")
@click.option("--resume", is_flag=True, help="Finish an upgrade that stopped midway.")
@click.option("--noded-port", type=click.IntRange(1, 65535), default=ports.NODED,
              show_default=True)
@click.option("--node-timeout", type=click.FloatRange(1), default=180.0, show_default=True,
              help="Seconds a node has to answer with the new build after its switch.")
@click.option("--queue-timeout", type=click.FloatRange(1), default=3600.0, show_default=True,
              help="Seconds to wait for the running jobs once the queue is drained.")
@click.pass_context
def upgrade(ctx: click.Context, to_version: str | None, resume: bool, noded_port: int,
            node_timeout: float, queue_timeout: float) -> None:
    """Upgrade (or downgrade) herder on every node to the installed build VERSION, node by
    node and the master last, the guests running throughout (Ganeti's gnt-cluster upgrade).
    Run it on the master; install the build on every node first (docs/install.md
    "Upgrading")."""
    run(ctx, to_version, resume, noded_port=noded_port, node_timeout=node_timeout,
        queue_timeout=queue_timeout, say=click.echo)
