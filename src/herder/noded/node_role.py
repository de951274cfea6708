"""noded's RPCs for the node's role in the cluster (Ganeti's names): the master's daemons and the
master IP (`node_start_master_daemons`, `node_stop_master`, `node_activate_master_ip`,
`node_deactivate_master_ip`), a master candidate's demotion (`node_demote_from_mc`), and a node
taken over by another cluster (`node_adopt`, cluster merge).

As Ganeti's backend runs its `daemon-util` and master-IP setup script, these run
`herder daemon-util` on this node (systemd where it runs herder's units, else the supervisor):
the node daemon never starts daemons itself.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from herder.core import node_certs
from herder.core.cluster_secrets import SecretPaths
from herder.core.errors import HerderError
from herder.core.store import atomic_write

log = logging.getLogger("herder.noded")
DAEMON_UTIL_TIMEOUT = 120.0
# After node_adopt, what serves the old cluster stops and what reads the cluster's secrets
# restarts (noded itself last: the RPC's answer goes out first).
ADOPT_STOP = ("maintd", "masterd")
ADOPT_RESTART = ("mond", "instmon", "noded")
ADOPT_DELAY = 1.0


class RoleFailure(HerderError):
    """A role RPC could not be carried out."""


def daemon_util(*args: str, timeout: float = DAEMON_UTIL_TIMEOUT) -> str:
    """`herder daemon-util ARGS` on this node; its output, RoleFailure when it fails."""
    argv = [sys.executable, "-m", "herder.cli.main", "daemon-util", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RoleFailure(f"daemon-util {' '.join(args)} did not finish within "
                          f"{timeout:g}s") from None
    if done.returncode != 0:
        raise RoleFailure(f"daemon-util {' '.join(args)} failed: "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")
    return done.stdout.strip()


def master_ip_options(args: dict[str, Any]) -> list[str]:
    """The RPC's master network (Ganeti's master_params: ip, netmask, netdev, ip_family) as
    daemon-util's options; what the master leaves out comes from this node's ssconf."""
    options: list[str] = []
    for key, option in (("ip", "--ip"), ("netmask", "--netmask"), ("netdev", "--netdev"),
                        ("ip_family", "--family")):
        value = args.get(key)
        if value is not None and value != "":
            options += [option, str(value)]
    return options


class RoleRpcs:
    """Mixed into `NodeDaemon`, which sets these."""

    data_dir: Path  # where the config copy, the secrets and ssconf live on this node
    epoch_file: Path  # the master epoch record

    def rpc_node_start_master_daemons(self, args: dict[str, Any]) -> str:
        """Start masterd and maintd here (Ganeti: `daemon-util start-master`)."""
        return daemon_util("start-master") or "master daemons started"

    def rpc_node_stop_master(self, args: dict[str, Any]) -> str:
        """Stop maintd and masterd here (Ganeti: `daemon-util stop-master`)."""
        return daemon_util("stop-master") or "master daemons stopped"

    def rpc_node_activate_master_ip(self, args: dict[str, Any]) -> str:
        return daemon_util("activate-master-ip", *master_ip_options(args))

    def rpc_node_deactivate_master_ip(self, args: dict[str, Any]) -> str:
        return daemon_util("deactivate-master-ip", *master_ip_options(args))

    def rpc_node_demote_from_mc(self, args: dict[str, Any]) -> dict[str, Any]:
        """No longer a master candidate (Ganeti's DemoteFromMC): the config copy is kept as
        `config.json.demoted` and removed, with the job queue copy, so that nothing here (confd,
        mond) reads a config that no longer follows the master's."""
        config = self.data_dir / "config.json"
        removed = []
        if config.exists():
            shutil.copy2(config, config.with_name("config.json.demoted"))
            config.unlink()
            removed.append(str(config))
        queue = self.data_dir / "queue"
        if queue.is_dir():
            shutil.rmtree(queue)
            removed.append(str(queue))
        return {"removed": removed}

    def rpc_node_adopt(self, args: dict[str, Any]) -> dict[str, Any]:
        """This node now belongs to the cluster whose secrets come with the call (cluster
        merge; signed with the key of the cluster the node leaves): the new HMAC key,
        cluster certificate and this node's certificate (issued by it) replace the old ones,
        the config and job queue copies and the ssconf files go (the new master pushes its
        own), the master epoch record starts afresh, the master's daemons stop, and the
        daemons that hold the secrets restart."""
        secrets = SecretPaths.beside(self.data_dir / "config.json")
        wanted = {"hmac_key": secrets.hmac_key, "certificate": secrets.certificate,
                  "node_certificate": self.data_dir / node_certs.NODE_CERT_FILE}
        blobs: dict[Path, bytes] = {}
        for key, target in wanted.items():
            value = args.get(key)
            if not isinstance(value, str) or not value:
                raise RoleFailure(f"node_adopt needs {key}")
            blobs[target] = base64.b64decode(value, validate=True)
        self.rpc_node_demote_from_mc({})
        for stale in self.data_dir.glob("ssconf_*"):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        for target, data in blobs.items():
            atomic_write(target, data, 0o600)
        with contextlib.suppress(FileNotFoundError):
            self.epoch_file.unlink()
        with contextlib.suppress(RoleFailure):
            daemon_util("stop", *ADOPT_STOP)
        restart_later(ADOPT_RESTART)
        return {"secrets": sorted(str(p) for p in blobs), "restarting": list(ADOPT_RESTART)}


def restart_running(daemons: tuple[str, ...], delay: float = ADOPT_DELAY) -> list[str]:
    """`restart_later` of those of `daemons` that run here (daemon-util check); their names."""
    running = []
    for name in daemons:
        try:
            daemon_util("check", name, timeout=30)
        except RoleFailure:
            continue
        running.append(name)
    if running:
        restart_later(tuple(running), delay)
    return running


def restart_later(daemons: tuple[str, ...], delay: float = ADOPT_DELAY) -> None:
    """Restart `daemons` through daemon-util after `delay` seconds, from a process of its own
    session (restarting noded ends noded's process group)."""
    herder = f"{sys.executable} -m herder.cli.main daemon-util"
    names = " ".join(daemons)
    script = f"sleep {delay:g}; {herder} stop {names}; {herder} start {names}"
    subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, cwd="/",
                     env={**os.environ})
    log.info("restarting %s in %gs", names, delay)
