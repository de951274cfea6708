"""A rolling upgrade (`herder cluster upgrade`, `core.rpcdefs.upgrade_calls`): the builds this
node has installed, and the switch of its daemons to another one.

The switch stops noded itself, so noded only starts it: `herder daemon-util switch-version`
runs from a process of its own (its own session under the supervisor, whose stop of noded ends
noded's process group; a transient unit under systemd, whose stop of herder-noded ends the
unit's cgroup), its output appended to `/var/log/herder/upgrade.log`. The master then waits
for the node's ping to name the new build."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from herder import __version__
from herder.core import install_layout as versions
from herder.core.rpcdefs import upgrade_calls
from herder.noded.node import Node, RpcFailure

log = logging.getLogger("herder.noded")
# the answer goes out before the daemons stop
SWITCH_DELAY = 1.0
# systemd runs this host: the switch goes into a transient unit of its own
SYSTEMD_RUNTIME = Path("/run/systemd/system")


def upgrade_check(node: Node, call: upgrade_calls.UpgradeCheck) -> upgrade_calls.VersionsAnswer:
    layout = versions.running_layout()
    return upgrade_calls.VersionsAnswer(
        node=node.name, running=__version__,
        prefix=None if layout is None else str(layout.prefix),
        current=None if layout is None else layout.current_version(),
        installed=layout is not None and layout.installed(call.version))


def upgrade_switch(node: Node, call: upgrade_calls.UpgradeSwitch) -> str:
    layout = versions.running_layout()
    if layout is None:
        raise RpcFailure(f"noded on {node.name} does not run from a versioned install "
                         f"(<prefix>/{versions.VERSIONS}/<version>; it runs {sys.prefix}): "
                         "docs/install.md \"Upgrading\"")
    if not layout.installed(call.version):
        raise RpcFailure(f"herder {call.version} is not installed on {node.name}: no "
                         f"{layout.version_dir(call.version)}/bin/herder")
    versions.UPGRADE_LOG.parent.mkdir(parents=True, exist_ok=True)
    switch = shlex.join([sys.executable, "-m", "herder.cli.main", "daemon-util",
                         "switch-version", "--prefix", str(layout.prefix), call.version])
    script = f"sleep {SWITCH_DELAY:g}; exec {switch}"
    argv = ["sh", "-c", script]
    if SYSTEMD_RUNTIME.is_dir() and shutil.which("systemd-run"):
        # the unit's output is its own (the journal by default), not systemd-run's: appended
        # to the upgrade log as under the supervisor
        log_to = f"append:{versions.UPGRADE_LOG}"
        argv = ["systemd-run", "--quiet", "--collect", "--unit",
                f"herder-switch-version-{int(time.time())}",
                f"--property=StandardOutput={log_to}", f"--property=StandardError={log_to}",
                "--", *argv]
    with open(versions.UPGRADE_LOG, "ab") as out:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True, cwd="/", env={**os.environ})
    log.info("switching to herder %s (from %s) in %gs", call.version, __version__,
             SWITCH_DELAY)
    return f"switching {node.name} from herder {__version__} to {call.version}"
