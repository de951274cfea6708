"""`herder cluster simulate`: a real herder cluster on this machine, every node a host of its own.

Each node is a namespaced host (`herder.sim.host`: its own PID, mount, network and UTS
namespaces, its own /var/lib/herder, /etc/herder, /run, /var/log/herder, /srv, LVM and libvirt
directories), whose supervisor runs herder's daemons from /etc/herder/node.toml with the same
default paths, ports and options as on a real host. What differs between nodes is the cluster's
data (node names = host names, addresses, node parameters), never a daemon option.

Guests (`guests`): "qemu" (the default) runs real ones: each host's libvirtd runs the QEMU
driver (`qemu:///system`, the cluster's `libvirt_uri` node parameter), listening only on TLS
with the node's certificate once the node has joined (`herder node libvirt-tls` on the node),
and the `herder-guest` OS (`herder.sim.guest`: a Debian kernel and a busybox initramfs built on
this machine) boots from the cluster's kvm hvparams `kernel_path`/`initrd_path`. "test" keeps
libvirt's test driver (`test+unix:///default`), which runs nothing: fast, for tests that need
no guest.

The cluster is built as an operator builds one (docs/real-nodes.md "The simulated cluster"):

1. the hosts boot with libvirtd;
2. on node 1: `herder cluster init` (its config and secrets in /var/lib/herder, the master IP a
   floating address on `br0`), `daemon-util activate-master-ip`, the node daemons and masterd;
3. every other node starts noded without the cluster's secrets: it makes a join token
   (`herder node join-token` prints it there);
4. on node 1: `herder node add NAME --join-token TOKEN` for each (the master joins it: its node
   certificate, the HMAC key, ssconf; then pushes the cluster's files); nodes 2 and 3 join
   as master candidates (the pool's size is 3: they receive the config and the job queue by
   redistribution);
5. mond, instmon and confd on every node; node.toml enables them (and masterd and maintd,
   which exit 11 where they are not the master) for the next boot.

With `--store etcd` (`herder.sim.etcd`) the config lives in an external etcd in the
simulation's network (outside every host): node1's `cluster init` writes it there, its masterd
wins the master lease and brings the master IP up itself, every other node's masterd is a
standby candidate, the elected masterd starts maintd, and no confd runs. A Debian host gets the
etcd client's files and the location by the guide's step (`node-install.sh etcd-client`:
`HERDER_CONFIG` in /etc/herder/environment, which every unit reads); a namespace host's
masterd and maintd have the location in node.toml.

The machine reaches the cluster only through published ports (`herder.sim.forward`): the
cluster's address `127.0.0.<first>` forwards to the master IP (masterd 5080, mond 1815, maintd
1816 and 1817), so a master failover changes nothing for the operator; node i's mond is on
`127.0.0.<first + i>`. A client profile (`<dir>/client/client.toml`) holds the cluster
certificate, the RAPI credentials and these addresses; `export HERDER_CLIENT=...` is all a shell
needs. `--exec NODE -- COMMAND` runs a command on a node, as ssh would.

A node that power-cycles itself (noded's `node_powercycle`: reboot(2) ends its PID namespace)
is booted again by the simulation's keeper (`herder.sim.keeper`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from herder.core import client_profile, ports, supervise_control
from herder.core.cluster_secrets import SecretPaths
from herder.core.errors import HerderError
from herder.core.rapi import RapiClient, RapiError, tls_context
from herder.sim import bmc as sim_bmc
from herder.sim import ceph as sim_ceph
from herder.sim import debhost, debroot, guest, hostfiles, netns
from herder.sim import etcd as sim_etcd
from herder.sim import watchdog as sim_watchdog
from herder.sim.host import HostConfig, HostSimulation, SimHost, unsupported

DOMAIN = "sim.herder.test"
STATE_FILE = "sim.json"
BREAK_SCRIPT = "herder-sim-diagnose"  # the diagnose command a simulated node runs
DIAGNOSE_DIR = "/etc/ganeti/node-diagnose-commands"
DIAGNOSE_INTERVAL = 2.0
MAINTENANCE_INTERVAL = 1  # seconds between maintd's rounds
DEMO_OS = "debootstrap"
DEMO_VARIANTS = ("default", "minimal")
OS_DIR = "/srv/herder/os"
# The templates a simulated cluster enables, the default (sharedfile: the NFS stand-in) first:
# only those its hosts can run, so `cluster verify`'s node checks pass on it. sharedfile and ext
# (the sharedimg provider on shared images) move between nodes with their data, file and
# blockdev are local; plain and drbd are not enabled (no device-mapper here: an LV could hold
# no data, and no DRBD module answers the DRBD checks).
SIM_DISK_TEMPLATES = "sharedfile,ext,file,blockdev,diskless"
# A Debian host (systemd-nspawn) has the machine's loop devices (herder.sim.debhost.LOOP_UNIT):
# ext on the sharedimg provider, whose images are attached as loop devices; no blockdev yet
# (its loop device, made by the simulator, is not made for these hosts)
DEBIAN_DISK_TEMPLATES = "sharedfile,ext,file,diskless"
DATA_DIR = Path("/var/lib/herder")
LIBVIRT_URI = "test+unix:///default"  # each host's own libvirtd, libvirt's test driver
QEMU_URI = "qemu:///system"  # each host's own libvirtd, the QEMU driver (real guests)
GUESTS = ("qemu", "test")
HOSTS = ("namespace", "debian")  # herder.sim.host's namespaced hosts, herder.sim.debhost's
STORES = ("file", "etcd")  # where the config lives: a file on the master candidates, or etcd
ETCD_CLUSTER = "sim"  # the cluster's name in etcd (its keys under /herder/sim/)
QEMU = "/usr/bin/qemu-system-x86_64"
# the candidate pool: nodes 1-3 become master candidates as they are added (design-2.1's pool
# of 10 is more than needed)
CANDIDATES = 3
MASTER_SLOTS = range(2, 10)  # the cluster's master IP: 198.18.<n>.<2..9>
FIRST_NODE = 11  # node addresses from 198.18.<n>.11
READY = {"noded": "serving RPC on", "mond": "listening on", "masterd": "serving RAPI on",
         "maintd": "listening on", "confd": "listening on udp"}
START_TIMEOUT = 60.0
LIBVIRTD_RESTART_TIMEOUT = 60.0  # a restarted libvirtd answers on its socket again
LIVE_FIGURES_TIMEOUT = 60.0  # masterd has every node's figures (its cache: 10 s per failure)

Say = Callable[[str], None]


@dataclass
class SimNode:
    name: str
    address: str  # in the cluster's network
    published: str  # 127.0.0.x: its mond, from the machine


@dataclass
class SimState:
    """The simulator's record of a cluster (`<dir>/sim.json`, the machine's side)."""

    directory: str
    cluster_name: str
    master_ip: str  # the floating master IP, in the cluster's network
    published: str  # 127.0.0.x: the cluster (masterd, maintd, the master's mond)
    nodes: list[SimNode]
    network: str  # the directory of the host simulation (this one, or another cluster's)
    profile: str = ""  # the client profile (HERDER_CLIENT)
    guests: str = "test"  # "qemu": real guests (QEMU driver), "test": libvirt's test driver
    hosts: str = "namespace"  # "debian": Debian 12 hosts booting systemd (herder.sim.debhost)
    ceph: str = ""  # the directory of the cluster's Ceph (herder.sim.ceph), "" for none
    etcd: str = ""  # the config location on the etcd backend (herder.sim.etcd), "" for a file
    # what the hosts' supervisors run herder's daemons with (an installed build's
    # `bin/herder`); empty: the simulator's own interpreter and checkout
    herder_command: list[str] = field(default_factory=list)

    @property
    def node_environment(self) -> dict[str, str]:
        """What the commands on a node need besides the defaults (masterd and maintd have it
        in node.toml): the etcd backend's config location, as an operator's
        /etc/herder/environment holds it."""
        return {"HERDER_CONFIG": self.etcd} if self.etcd else {}

    @property
    def libvirt_uri(self) -> str:
        return QEMU_URI if self.guests == "qemu" else LIBVIRT_URI

    @property
    def masterd_url(self) -> str:
        return f"https://{self.published}:{ports.MASTERD}"

    @property
    def maintd_url(self) -> str:
        return f"http://{self.published}:{ports.MAINTD}"

    def ceph_admin(self) -> sim_ceph.CephCluster:
        """The administrator's view of the cluster's Ceph (commands in its network)."""
        if not self.ceph:
            raise HerderError("this simulated cluster has no Ceph (simulate --ceph)")
        return sim_ceph.attach(Path(self.ceph), netns=self.simulation().netns)

    @property
    def client_dir(self) -> Path:
        return Path(self.directory) / "client"

    def save(self) -> None:
        (Path(self.directory) / STATE_FILE).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, directory: Path) -> SimState | None:
        try:
            data = json.loads((directory / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        try:
            data["nodes"] = [SimNode(**n) for n in data["nodes"]]
            return cls(**data)
        except TypeError:  # a record of an older simulator
            return None

    def node(self, name: str) -> SimNode:
        """A node by its name, or by its first label."""
        found = next((n for n in self.nodes if n.name == name), None) or next(
            (n for n in self.nodes if n.name.split(".")[0] == name), None)
        if found is None:
            raise HerderError(f"no node {name!r} in the simulated cluster "
                              f"({', '.join(n.name for n in self.nodes)})")
        return found

    def simulation(self) -> HostSimulation:
        return HostSimulation.open(Path(self.network))

    def host(self, name: str) -> SimHost:
        return self.simulation().host(self.node(name).name)

    def client_environment(self) -> dict[str, str]:
        """What a shell of the machine needs to drive the cluster (`export` lines)."""
        return {client_profile.ENV_FILE: self.profile}

    def rapi(self, timeout: float = 60.0) -> RapiClient:
        """A RAPI client of the cluster's masterd, from the machine (the client profile)."""
        profile = client_profile.load({client_profile.ENV_FILE: self.profile})
        assert profile.ca is not None and profile.user is not None
        return RapiClient(self.masterd_url, profile.user, profile.password(),
                          verify=tls_context(profile.ca, check_hostname=False), timeout=timeout)


def run_cli(state: SimState, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`herder ARGS` from this machine as an operator's shell runs it: the cluster's client
    profile, none of this process's other HERDER_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERDER_")}
    env.update(state.client_environment())
    return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def load_state(directory: Path) -> SimState:
    state = SimState.load(directory)
    if state is None:
        raise HerderError(f"no simulated cluster is running in {directory}")
    return state


# --- files an operator installs on a node ------------------------------------------------------


def write_demo_os(root: Path) -> Path:
    """A small OS definition (API 15/20, with variants) under `root` (a node's /srv/herder/os)
    whose create script writes a marker on the instance's first disk."""
    os_dir = root / DEMO_OS
    os_dir.mkdir(parents=True, exist_ok=True)
    (os_dir / "ganeti_api_version").write_text("20\n15\n")
    (os_dir / "variants.list").write_text("\n".join(DEMO_VARIANTS) + "\n")
    (os_dir / "parameters.list").write_text("packages extra packages to install\n")
    scripts = {
        "create": '#!/bin/sh\nset -e\n[ -n "$DISK_0_PATH" ] && '
                  'printf "herder-demo-os %s %s\\n" "$OS_VARIANT" "$INSTANCE_NAME" '
                  '| dd of="$DISK_0_PATH" conv=notrunc status=none\nexit 0\n',
        # Ganeti's OS API: export writes the disk $EXPORT_DEVICE to stdout, import writes
        # stdin to the disk $IMPORT_DEVICE (each runs once per disk); a pipe there (a
        # userspace rbd image's import command reads it) cannot be synced
        "export": '#!/bin/sh\nset -e\nexec dd if="$EXPORT_DEVICE" bs=1M status=none\n',
        "import": '#!/bin/sh\nset -e\n'
                  '[ -p "$IMPORT_DEVICE" ] && exec dd of="$IMPORT_DEVICE" bs=1M status=none\n'
                  'exec dd of="$IMPORT_DEVICE" bs=1M conv=notrunc,fsync status=none\n',
        "rename": "#!/bin/sh\nexit 0\n", "verify": "#!/bin/sh\nexit 0\n",
    }
    for name, body in scripts.items():
        path = os_dir / name
        path.write_text(body)
        path.chmod(0o755)
    return root


def diagnose_script(path: Path, data: dict[str, object]) -> Path:
    """Replace `path` (atomically) with a self-diagnose command printing `data` as JSON, mode
    0755 (white-listed when its owner is root, as the writer is here)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(data)}\nEOF\n")
    tmp.chmod(0o755)
    tmp.replace(path)
    return path


def write_diagnose(host: SimHost, status: str = "Ok", command: str = "") -> Path:
    """The node's self-diagnose script in its white-list directory: it prints `status`."""
    return diagnose_script(host.path(f"{DIAGNOSE_DIR}/{BREAK_SCRIPT}"), {
        "status": status, "command": command,
        "details": {"simulated": True, "since": int(time.time())} if status != "Ok" else {}})


# --- commands on the nodes -----------------------------------------------------------------


def on_node(host: SimHost, *args: str, timeout: float = 180.0,
            env: dict[str, str] | None = None) -> str:
    """`herder ARGS` on a node (`env`: added to its environment); its output, HerderError
    (with its last words) when it fails."""
    done = host.run(host.herder_argv(*args), timeout=timeout, env=env)
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        raise HerderError(f"{host.name}: herder {' '.join(args)} failed: {' | '.join(tail)}")
    return done.stdout


def copy_file(source: SimHost, path: str, target: SimHost, target_path: str | None = None,
              mode: str = "600") -> None:
    """Copy a file from one node to another as an operator does over ssh: `cat` on one, write
    it on the other (never through the machine's view of their directories)."""
    read = source.run(["cat", path], timeout=60)
    if read.returncode != 0:
        raise HerderError(f"{source.name}: cannot read {path}: {read.stderr.strip()}")
    where = target_path or path
    write = target.run(["sh", "-c", 'umask 077 && mkdir -p "$(dirname "$1")" && cat > "$1" && '
                        'chmod "$2" "$1"', "copy", where, mode], input=read.stdout, timeout=60)
    if write.returncode != 0:
        raise HerderError(f"{target.name}: cannot write {where}: {write.stderr.strip()}")


def _journal(host: SimHost, daemon: str) -> str:
    """A daemon's output on a Debian host since its unit last started: the journal of the
    unit's current invocation (systemd runs it), or of its main process: journald finds a
    message's invocation through the sender's cgroup, and a unit restarted after a failed
    cgroup attach (exit 219/CGROUP, seen once on a loaded machine) served while its lines
    carried none (the simulator waited 60 s for a masterd serving for 54)."""
    unit = f"herder-{daemon}.service"
    script = (f'id=$(systemctl show -P InvocationID {unit}); '
              f'pid=$(systemctl show -P MainPID {unit}); set --; '
              '[ -n "$id" ] && set -- "_SYSTEMD_INVOCATION_ID=$id"; '
              '[ -n "$pid" ] && [ "$pid" != 0 ] && set -- "$@" ${1:+"+"} "_PID=$pid"; '
              '[ $# -gt 0 ] || exit 0; journalctl -q --no-pager -o cat "$@"')
    return host.run(["sh", "-c", script], timeout=30).stdout


def _log_size(host: SimHost, daemon: str) -> int:
    if host.debian:  # its journal is read from its unit's (re)start on
        return 0
    with contextlib.suppress(OSError):
        return host.path(f"/var/log/herder/{daemon}.log").stat().st_size
    return 0


def _stopped(host: SimHost, daemon: str) -> str | None:
    """Why a daemon started on the host is not running (None: it runs or is starting)."""
    if host.debian:  # its unit: failed, or inactive (exit 11 where it is not its role)
        state = host.run(["systemctl", "is-active", f"herder-{daemon}.service"],
                         timeout=30).stdout.strip()
        return state if state in ("failed", "inactive") else None
    found = host.supervisor("status", [daemon]).daemons[0]
    if found.state in (supervise_control.STOPPED, supervise_control.NOT_MY_ROLE):
        return found.message or found.state
    return None


def start_daemons(host: SimHost, daemons: Sequence[str], timeout: float = START_TIMEOUT) -> None:
    """`daemon-util start DAEMONS` on the node (its supervisor), then wait until each says it
    serves (its log line), or fail with the end of its log."""
    if not daemons:
        return
    offsets = {d: _log_size(host, d) for d in daemons}
    if host.debian:  # systemd started them at boot, before the node joined: again, joined
        on_node(host, "daemon-util", "stop", *daemons)
    on_node(host, "daemon-util", "start", *daemons)
    for daemon in daemons:
        wait_ready(host, daemon, offsets[daemon], timeout)


def wait_ready(host: SimHost, daemon: str, offset: int = 0,
               timeout: float = START_TIMEOUT, marker: str | None = None) -> None:
    """Until the daemon's log (from `offset`) says it serves (`marker`, default READY's)."""
    log = host.path(f"/var/log/herder/{daemon}.log")
    marker = marker or READY.get(daemon)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = ""
        if host.debian:
            text = _journal(host, daemon)[offset:]
        else:
            with contextlib.suppress(OSError), open(log, "rb") as fh:
                fh.seek(offset)
                text = fh.read().decode(errors="replace")
        if marker is None or marker in text:
            return
        why = _stopped(host, daemon)
        if why is not None:
            tail = " | ".join(text.strip().splitlines()[-3:])
            raise HerderError(f"{host.name}: {daemon} stopped ({why}): {tail}")
        time.sleep(0.3 if host.debian else 0.05)
    raise HerderError(f"{host.name}: {daemon} did not serve within {timeout:g}s")


# libvirt's test driver starts with a running domain "test" that is no instance. Its state
# lives while a client is connected: removed until it stays removed (noded, mond and instmon
# hold connections by then). A node runs this at every boot (node.toml's `sim-testdriver`, a
# one-shot unit of the simulated hosts), and the simulator once when the node joins.
TEST_DOMAIN_SCRIPT = (
    f"u={LIBVIRT_URI}; end=$(( $(date +%s) + 60 )); "
    "while [ $(date +%s) -lt $end ]; do "
    "virsh -q -c $u destroy test >/dev/null 2>&1; "
    "virsh -q -c $u undefine test >/dev/null 2>&1; sleep 0.3; "
    "virsh -q -c $u dominfo test >/dev/null 2>&1 || exit 0; done; exit 1")


def remove_default_domain(host: SimHost) -> None:
    done = host.run(["sh", "-c", TEST_DOMAIN_SCRIPT], timeout=120)
    if done.returncode != 0:
        raise HerderError(f"{host.name}: the test driver's domain 'test' keeps coming back "
                          "(does noded hold a libvirt connection?)")


def parallel(hosts: Iterable[SimHost], action: Callable[[SimHost], Any]) -> None:
    chosen = list(hosts)
    if chosen:
        with ThreadPoolExecutor(max_workers=len(chosen)) as pool:
            list(pool.map(action, chosen))


# --- bringing a cluster up ---------------------------------------------------------------------


# the daemons that read the config (on the etcd backend: from etcd); the others use ssconf
CONFIG_DAEMONS = ("masterd", "maintd")


# herder's daemons (herder.supervise.settings.HERDER_DAEMONS, which sim may not import)
HERDER_COMMANDS = ("noded", "confd", "mond", "instmon", "masterd", "maintd")


def node_settings(*, mond: bool, maintd: bool, joined: bool, guests: str = "test",
                  ceph: bool = False, etcd: str = "",
                  herder_command: Sequence[str] = ()) -> str:
    """A node's /etc/herder/node.toml: libvirtd only until the node has joined; then every
    daemon of a node (masterd and maintd exit 11 where they are not the master, confd idles
    where there is no config copy). With real guests libvirtd runs with `--listen`: its
    libvirtd.conf opens nothing before the join and only TLS after it (`herder node
    libvirt-tls`). With a Ceph, noded's `rbd` runs as the cluster's cephx user
    (`CEPH_ARGS`), as an operator sets it in the daemon's environment. On the etcd backend
    (`etcd`: the config location) masterd and maintd have it as `HERDER_CONFIG`; confd does
    not run (it serves a config file only) and maintd is not started at boot: the masterd
    that wins the master lease starts it (docs/ha.md). `herder_command`: herder's daemons
    run as `COMMAND DAEMON` (an installed build, as a host's units run `/opt/herder/bin/herder
    DAEMON`) instead of the supervisor's own interpreter."""
    daemons = ["libvirtd"]
    if joined:
        daemons += ["noded", *([] if etcd else ["confd"]), *(["mond"] if mond else []),
                    *(["instmon"] if mond and maintd else []), "masterd",
                    *(["maintd"] if maintd and not etcd else []),
                    *(["sim-testdriver"] if guests == "test" else [])]
    # maintd polls the agents every second (its default: 10), so the demo and the tests see
    # it act at once
    args = {"maintd": ["--poll-interval", "1"]}
    if guests == "qemu":
        args["libvirtd"] = ["--listen"]
    environment: dict[str, dict[str, str]] = {
        daemon: {"HERDER_CONFIG": etcd} for daemon in CONFIG_DAEMONS} if etcd else {}
    if ceph:
        environment.setdefault("noded", {})["CEPH_ARGS"] = f"--id {sim_ceph.CLIENT}"
    commands = {"sim-testdriver": ["sh", "-c", TEST_DOMAIN_SCRIPT]}
    if herder_command:
        commands.update({d: [*herder_command, d] for d in HERDER_COMMANDS})
    return hostfiles.node_toml(daemons, args=args, commands=commands,
                               restart_delay=0.5, restart_delay_max=10.0,
                               environment=environment)


def _free_addresses(sim: HostSimulation, count: int,
                    taken: Iterable[str] = ()) -> tuple[str, list[str]]:
    """A master IP and `count` node addresses nobody uses in the simulation's network (nor
    in `taken`: those other clusters reserved)."""
    used = {h.address for h in sim.record.hosts.values()} | set(taken)
    used |= {target.rsplit(":", 1)[0] for target in sim.record.published.values()}
    master = next((sim.address(i) for i in MASTER_SLOTS if sim.address(i) not in used), None)
    if master is None:
        raise HerderError("no free master IP left in the simulation's network")
    nodes = [sim.address(i) for i in range(FIRST_NODE, 255) if sim.address(i) not in used]
    if len(nodes) < count:
        raise HerderError(f"only {len(nodes)} free addresses left for {count} nodes")
    return master, nodes[:count]


CLUSTERS_FILE = "clusters.json"
# The addresses each cluster of a network took (`<network>/reserved.json`: the cluster's
# directory -> its master IP and node addresses), from the moment it picked them: clusters
# started at once into one network (`--network`) record their hosts and master IP only later
NETWORK_LOCK = "network.lock"
RESERVED_FILE = "reserved.json"


def _reserve_addresses(sim: HostSimulation, directory: Path,
                       count: int) -> tuple[str, list[str]]:
    """`_free_addresses` taken under the network's lock and reserved for the cluster in
    `directory` until `_release_addresses`."""
    key = str(directory.resolve())
    path = sim.directory / RESERVED_FILE
    with debroot.locked(sim.directory / NETWORK_LOCK):
        reserved = _read_json(path)
        reserved.pop(key, None)
        master, nodes = _free_addresses(
            sim, count, (a for addresses in reserved.values() for a in addresses))
        reserved[key] = [master, *nodes]
        path.write_text(json.dumps(reserved, indent=1, sort_keys=True))
    return master, nodes


def _release_addresses(sim: HostSimulation, directory: Path) -> None:
    path = sim.directory / RESERVED_FILE
    with debroot.locked(sim.directory / NETWORK_LOCK):
        reserved = _read_json(path)
        if reserved.pop(str(directory.resolve()), None) is not None:
            path.write_text(json.dumps(reserved, indent=1, sort_keys=True))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def register_cluster(sim: HostSimulation, state: SimState | None, *,
                     forget: str | None = None) -> None:
    """The clusters of a simulation's network (`<network>/clusters.json`: name -> master IP)
    and the shared /etc/hosts with them: every host, and each cluster's name at its master
    IP (a cluster's name resolves to its master, as Ganeti's does). Under the network's
    lock: two clusters starting at once must not lose each other's entry."""
    with debroot.locked(sim.directory / NETWORK_LOCK):
        _register_cluster(sim, state, forget)


def _register_cluster(sim: HostSimulation, state: SimState | None, forget: str | None) -> None:
    path = sim.directory / CLUSTERS_FILE
    try:
        clusters = json.loads(path.read_text())
    except (OSError, ValueError):
        clusters = {}
    if forget is not None:
        clusters.pop(forget, None)
    if state is not None:
        clusters[state.cluster_name] = state.master_ip
    path.write_text(json.dumps(clusters, indent=1, sort_keys=True))
    sim.write_hosts([(ip, [name]) for name, ip in sorted(clusters.items())])


def start(directory: Path, nodes: int = 3, *, mond: bool = True, maintd: bool = True,
          first_ip: int = 11, progress: Say | None = None, domain: str = DOMAIN,
          network: Path | None = None, guests: str = "qemu", ceph: bool = False,
          store: str = "file", herder_command: Sequence[str] = (),
          install: Callable[[SimHost], None] | None = None,
          hosts: str = "namespace") -> SimState:
    """Bring up a simulated cluster of `nodes` nodes in `directory` (replacing any there);
    `domain` names the cluster and its nodes; `network`: the directory of another simulated
    cluster whose network (and host simulation) this one joins (clusters to merge);
    `guests`: "qemu" (real guests) or "test" (libvirt's test driver); `ceph`: a Ceph for
    the `rbd` template in the simulation's network (herder.sim.ceph), its client
    configuration and key on every node, the template enabled with userspace access;
    `store`: "file" (the config a file on the master candidates) or "etcd" (an external etcd
    in the simulation's network, herder.sim.etcd; masterd campaigns on every node);
    `herder_command`: what the hosts run herder's daemons with (`node_settings`; e.g. an
    installed build's `bin/herder`), `install`: called for each host once it booted, before
    any daemon of herder starts there (what an operator installs first, e.g. that build)."""
    if guests not in GUESTS:
        raise HerderError(f"guests must be one of {', '.join(GUESTS)}")
    if hosts not in HOSTS:
        raise HerderError(f"hosts must be one of {', '.join(HOSTS)}")
    if hosts == "debian" and guests != "qemu":
        raise HerderError("--hosts debian: with --guests qemu only")
    if store not in STORES:
        raise HerderError(f"store must be one of {', '.join(STORES)}")
    if store == "etcd" and network is not None:
        raise HerderError("--store etcd gives a cluster a network of its own; not with "
                          "--network")
    if store == "etcd" and not maintd:
        raise HerderError("--store etcd: the masterd elected starts maintd; not with "
                          "--no-maintd")
    if store == "etcd" and (reason := sim_etcd.missing()):
        raise HerderError(f"--store etcd: {reason}")
    if ceph and network is not None:
        raise HerderError("--ceph gives a cluster a network of its own; not with --network")
    if ceph and (missing := sim_ceph.missing_packages()):
        raise HerderError(f"--ceph: Ceph is not installed (apt-get install {' '.join(missing)})")
    if not 1 <= nodes <= 200:
        raise HerderError("a simulated cluster has 1 to 200 nodes")
    if first_ip + nodes > 255:
        raise HerderError("not enough loopback addresses for that many nodes")
    reason = unsupported()
    if reason:
        raise HerderError(f"cannot simulate a cluster here: {reason}")
    say = progress or (lambda message: None)
    image = None
    if guests == "qemu":
        image = guest.ensure_guest()  # before anything starts: a missing package is one line
    stop(directory)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    if network is not None:
        sim = load_state(network).simulation()
    else:
        sim = HostSimulation.create(directory)
    try:
        master_ip, addresses = _reserve_addresses(sim, directory, nodes)
        state = SimState(
            directory=str(directory.resolve()), cluster_name=f"cluster.{domain}",
            master_ip=master_ip, published=f"127.0.0.{first_ip}",
            nodes=[SimNode(f"node{i}.{domain}", addresses[i - 1], f"127.0.0.{first_ip + i}")
                   for i in range(1, nodes + 1)],
            network=str(sim.directory), profile=str(directory.resolve() / "client" /
                                                     "client.toml"), guests=guests,
            ceph=str(directory.resolve() / "ceph") if ceph else "",
            herder_command=list(herder_command), hosts=hosts)
        if store == "etcd":
            state.etcd = _start_etcd(sim, state, say)
        state.save()
        with ThreadPoolExecutor(max_workers=1) as starter:
            # the Ceph (~15 s, mostly waiting for its daemons) starts while the hosts boot;
            # leaving this block waits for it, also when the bring-up failed (the teardown
            # must find its daemons)
            ceph_started = starter.submit(_start_ceph, sim, state, say) if ceph else None
            _bring_up(sim, state, mond=mond, maintd=maintd, say=say, image=image,
                      ceph_started=ceph_started, install=install)
    except BaseException:
        stop(directory)
        raise
    return state


def _etcd_directory(state: SimState) -> Path:
    return Path(state.directory) / "etcd"


def _start_etcd(sim: HostSimulation, state: SimState, say: Say) -> str:
    """The cluster's etcd (in the simulation's network, outside every host) with herder's
    user; the config location of the cluster in it."""
    began = time.monotonic()
    found = sim_etcd.start(_etcd_directory(state), sim)
    location = found.location(ETCD_CLUSTER)
    sim_etcd.setup_access(found, sim, location)
    say(f"etcd: one member at {found.endpoint} (TLS, client certificates, user "
        f"{sim_etcd.USER}), config location {location} ({time.monotonic() - began:.1f} s)")
    return location


def _start_ceph(sim: HostSimulation, state: SimState, say: Say) -> None:
    began = time.monotonic()
    sim_ceph.start(Path(state.ceph), sim.address(netns.SIMULATOR_HOST), netns=sim.netns)
    say(f"Ceph: a monitor and an OSD at {sim.address(netns.SIMULATOR_HOST)}, pool "
        f"{sim_ceph.POOL} ({time.monotonic() - began:.1f} s)")


# The instance policy's bounds on a simulated cluster: Ganeti's default maxima, minima that let
# its small guests in (tens of MiB of disk and memory, no NIC or no disk at all), as an operator
# of such a cluster would set them with gnt-cluster modify --ipolicy-bounds-specs.
SIM_IPOLICY_BOUNDS = ("min:memory-size=16,cpu-count=1,disk-count=0,disk-size=1,nic-count=0,"
                      "spindle-use=0/max:memory-size=32768,cpu-count=8,disk-count=16,"
                      "disk-size=1048576,nic-count=8,spindle-use=12")


def init_arguments(state: SimState, image: guest.GuestImage | None) -> list[str]:
    """`herder cluster init` on the first node: the cluster's name, master IP, templates, the
    hypervisor and its parameters (real guests: kvm booting the herder-guest kernel), NICs on
    the nodes' br0, the libvirt URI."""
    args = ["cluster", "init", state.cluster_name, "--master-netdev", "br0",
            "--candidate-pool-size", str(CANDIDATES),
            "--master-ip", state.master_ip, "--master-netmask", "24",
            "--enabled-disk-templates",
            (DEBIAN_DISK_TEMPLATES if state.hosts == "debian" else SIM_DISK_TEMPLATES)
            + (",rbd" if state.ceph else ""),
            "--default-iallocator", "herder",
            "--node-parameters", f"libvirt_uri={state.libvirt_uri}",
            # every host's watchdog device and BMC (herder.sim.watchdog, herder.sim.bmc); a
            # Debian host has its own herder's OOB program
            "--node-parameters", f"watchdog_device={sim_watchdog.DEVICE}",
            "--node-parameters", f"oob_program={oob_program(state.hosts)}",
            # NICs on the hosts' bridge (Ganeti's default xen-br0 is no host's)
            "-N", "link=br0"]
    if state.ceph:  # no rbd kernel module here: QEMU reads the images through librbd
        args += ["-D", f"rbd:pool={sim_ceph.POOL},access=userspace"]
    if image is None:
        return [*args, "--enabled-hypervisors", "fake"]
    return [*args, "--enabled-hypervisors", "kvm", "-H",
            f"kvm:kernel_path={image.kernel},initrd_path={image.initrd},root_path=/dev/vda,"
            f"kernel_args={image.kernel_args},kvm_path={QEMU}"]


def oob_program(hosts: str = "namespace") -> Path:
    """The shipped IPMI OOB program (`herder-oob-ipmi`, installed beside this herder; on a
    Debian host, beside the herder its wheel installed)."""
    if hosts == "debian":
        return debhost.OOB_PROGRAM
    program = Path(sys.executable).parent / "herder-oob-ipmi"
    if not os.access(program, os.X_OK):
        raise HerderError(f"{program} is not installed: install herder (pip install -e .) so "
                          "that the nodes' out-of-band program exists")
    return program


def power(directory: Path, node: str, on: bool) -> str:
    """`simulate --power-off/--power-on NODE`: through the node's BMC, as an operator's
    ipmitool would (off: no grace, its guests gone at once); what the BMC answered."""
    state = load_state(directory)
    sim = state.simulation()
    host = state.host(node)
    port = sim_bmc.BASE_PORT + sim.record.hosts[host.name].slot
    password = sim_bmc.directory(sim, host.name) / "password"
    done = subprocess.run(
        ["nsenter", f"--net=/run/netns/{sim.netns}", "--", "ipmitool", "-I", "lanplus", "-H",
         sim.address(netns.SIMULATOR_HOST), "-p", str(port), "-U", sim_bmc.USER, "-f",
         str(password), "-C", "3", "-N", "5", "-R", "3", "chassis", "power",
         "on" if on else "off"],
        capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise HerderError(f"{host.name}'s BMC: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def _libvirt_tls(host: SimHost) -> None:
    """The node's libvirtd on TLS only with its node certificate (a joined node)."""
    if host.debian:  # the guide's step: `herder node libvirt-tls` and the socket units
        done = host.run(["bash", debhost.NODE_SCRIPT, "libvirt-tls"], timeout=180)
        if done.returncode != 0:
            raise HerderError(f"{host.name}: node-install.sh libvirt-tls failed: "
                              f"{(done.stderr or done.stdout).strip()[-500:]}")
        return
    on_node(host, "node", "libvirt-tls")
    on_node(host, "daemon-util", "stop", "libvirtd")
    on_node(host, "daemon-util", "start", "libvirtd")
    # the supervisor has started it, not yet its socket: wait, so that the cluster simulate
    # hands over has every node's hypervisor answering (an allocation right after would
    # leave a node out)
    deadline = time.monotonic() + LIBVIRTD_RESTART_TIMEOUT
    while host.run(["virsh", "-c", "qemu:///system", "uri"], timeout=10).returncode != 0:
        if time.monotonic() > deadline:
            raise HerderError(f"{host.name}: libvirtd did not come back within "
                           f"{LIBVIRTD_RESTART_TIMEOUT:.0f} s after its TLS restart")
        time.sleep(0.2)


def _bring_up(sim: HostSimulation, state: SimState, *, mond: bool, maintd: bool,
              say: Say, image: guest.GuestImage | None = None,
              ceph_started: Future[None] | None = None,
              install: Callable[[SimHost], None] | None = None) -> None:
    """Boot the hosts, make the cluster, join the nodes, start the daemons. `ceph_started`:
    the cluster's Ceph being started meanwhile (awaited before its client files are needed)."""
    hosts = _boot_hosts(sim, state, mond=mond, maintd=maintd, say=say,
                        ceph_started=ceph_started, install=install)
    master = hosts[0]
    others = hosts[1:]
    _init_master(sim, state, master, image, say)
    _join(state, master, others, say)

    # Every node: its other daemons; node.toml for the next boot.
    extra = [*(["mond"] if mond else []), *(["instmon"] if mond and maintd else [])]

    def finish(host: SimHost) -> None:
        if state.guests == "qemu":  # every node joined: every node's certificate is known
            _libvirt_tls(host)
        start_daemons(host, ([] if host is master or state.etcd else ["confd"]) + extra)
        if state.etcd and host is not master:  # a candidate: a standby for the master lease
            offset = _log_size(host, "masterd")
            on_node(host, "daemon-util", "start", "masterd")
            wait_ready(host, "masterd", offset, marker="standby")
        if state.guests == "test":
            remove_default_domain(host)
        if host.debian:  # systemd starts its units at boot: no supervisor settings
            return
        host.layout.source("/etc/herder/node.toml").write_text(
            node_settings(mond=mond, maintd=maintd, joined=True, guests=state.guests,
                          ceph=bool(state.ceph), etcd=state.etcd,
                          herder_command=state.herder_command))

    parallel(hosts, finish)
    if state.guests == "qemu":
        _await_live_figures(state)
    if maintd and state.etcd:  # the elected masterd started it
        wait_ready(master, "maintd")
    elif maintd:
        start_daemons(master, ["maintd"])
    for node in state.nodes:
        say(f"{node.name}: {node.address} (mond at http://{node.published}:{ports.MOND})")
    sim.keep_powered()
    state.save()


def _boot_hosts(sim: HostSimulation, state: SimState, *, mond: bool, maintd: bool, say: Say,
                ceph_started: Future[None] | None,
                install: Callable[[SimHost], None] | None = None) -> list[SimHost]:
    """The hosts booted with their BMCs, and what an operator installs on each: the Ceph
    and etcd clients' files, the OS definitions, the self-diagnose script."""
    say(f"booting {len(state.nodes)} hosts (network {sim.netns}, "
        f"{sim.address(1).rsplit('.', 1)[0]}.0/24)")
    configs = [HostConfig(n.name, n.address,
                          node_settings=node_settings(mond=mond, maintd=maintd, joined=False,
                                                      guests=state.guests,
                                                      ceph=bool(state.ceph), etcd=state.etcd,
                                                      herder_command=state.herder_command),
                          kind=state.hosts)
               for n in state.nodes]
    hosts = sim.add_hosts(configs)
    sim.keep_powered()  # also the hosts' watchdog devices, which noded opens once joined
    sim_bmc.start_all(sim, hosts)
    say(f"BMCs (ipmi_sim) at {sim.address(netns.SIMULATOR_HOST)}:"
        f"{sim_bmc.BASE_PORT + 1}..; each node's oob_program is {oob_program(state.hosts)}")
    register_cluster(sim, state)
    if ceph_started is not None:
        ceph_started.result()  # its error, if any, is the start's
    if state.ceph:  # as an operator installs a Ceph client
        began = time.monotonic()
        admin = state.ceph_admin()
        parallel(hosts, lambda host: install_ceph_client(host, admin))
        say(f"Ceph client (configuration, client.{sim_ceph.CLIENT}'s key) on every node"
            + (" by node-install.sh ceph-client" if state.hosts == "debian" else "")
            + f" ({time.monotonic() - began:.1f} s)")
    for host in hosts:
        if state.etcd:
            _install_etcd_client(sim, state, host)
        write_demo_os(host.path(OS_DIR))
        guest.install_os_definition(host.path(OS_DIR))
        write_diagnose(host)
    if install is not None:
        parallel(hosts, install)
    return hosts


CEPH_CLIENT_FILES = "/root/ceph-client"  # where the operator copied the Ceph's two files


def ceph_client_step(user: str = sim_ceph.CLIENT, pool: str = sim_ceph.POOL,
                     directory: str = CEPH_CLIENT_FILES) -> list[str]:
    """The guide's Ceph client step on a Debian host (`node-install.sh ceph-client`), on the
    configuration and keyring copied to `directory`; with the pool, so that it checks the key."""
    return ["bash", debhost.NODE_SCRIPT, "ceph-client", f"{directory}/ceph.conf",
            f"{directory}/ceph.client.{user}.keyring", user, pool]


def install_ceph_client(host: SimHost, admin: sim_ceph.CephCluster) -> None:
    """The Ceph's client configuration and the restricted user's key on a node, as an
    operator installs them: on a Debian host the guide's step (the two files copied there
    first, removed after), which also gives herder's units `CEPH_ARGS`; on a namespace host
    the files written into its private /etc/ceph (node.toml gives noded `CEPH_ARGS`)."""
    if not host.debian:
        host.path("/etc/ceph/ceph.conf").write_text(admin.client_conf())
        keyring = host.path(sim_ceph.CLIENT_KEYRING)
        keyring.write_text(admin.client_keyring())
        keyring.chmod(0o600)
        return
    _guide_step(host, ceph_client_step(pool=admin.pool), CEPH_CLIENT_FILES, {
        "ceph.conf": admin.client_conf().encode(),
        f"ceph.client.{sim_ceph.CLIENT}.keyring": admin.client_keyring().encode()}, 180)


# Where the operator copied the etcd client's files on a Debian host before running the
# guide's step (removed once it installed them)
ETCD_FILES_INSIDE = "/root/herder-etcd-client"


def _install_etcd_client(sim: HostSimulation, state: SimState, host: SimHost) -> None:
    """What a node of a cluster on etcd needs (docs/ha.md): the client's CA, certificate, key
    and password and its settings file. A Debian host takes the guide's step
    (`node-install.sh etcd-client LOCATION DIR`, the files copied to DIR first, as an operator
    copies them over ssh), which also puts the config location into /etc/herder/environment,
    read by every unit; a namespace host gets the files from the simulator, its masterd and
    maintd the location from node.toml."""
    found = sim_etcd.attach(_etcd_directory(state), sim)
    if not host.debian:
        sim_etcd.install_client(found, host)
        return
    _guide_step(host, ["bash", debhost.NODE_SCRIPT, "etcd-client", state.etcd,
                       ETCD_FILES_INSIDE, sim_etcd.USER], ETCD_FILES_INSIDE,
                {name: (found.pki / source).read_bytes()
                 for source, name in sim_etcd.CLIENT_FILES}, 60)


def _guide_step(host: SimHost, argv: list[str], staged: str, files: dict[str, bytes],
                timeout: float) -> None:
    """A step of the guide's script (`argv`: bash NODE_SCRIPT STEP ...) on a Debian host, on
    the files an operator copied to `staged` first (0600 in a 0700 directory, removed after,
    whatever the step did); its failure in one line."""
    directory = host.path(staged)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        for name, data in files.items():
            target = directory / name
            target.write_bytes(data)
            target.chmod(0o600)
        done = host.run(argv, timeout=timeout)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if done.returncode != 0:
        raise HerderError(f"{host.name}: node-install.sh {argv[2]} failed: "
                          f"{(done.stderr or done.stdout).strip()[-500:]}")


def _init_master(sim: HostSimulation, state: SimState, master: SimHost,
                 image: guest.GuestImage | None, say: Say) -> None:
    """The first node: the cluster, the master IP, the node daemons, masterd. On etcd the
    masterd elected brings the master IP up itself (`MasterIpHolder`)."""
    env = state.node_environment
    on_node(master, *init_arguments(state, image), env=env)
    on_node(master, "--offline", "cluster", "modify", "--diagnose-data-collector-filename",
            BREAK_SCRIPT, "--data-collector", f"diagnose:interval={DIAGNOSE_INTERVAL}",
            "--maintenance-interval", str(MAINTENANCE_INTERVAL),
            "--ipolicy-bounds-specs", SIM_IPOLICY_BOUNDS, env=env)
    if not state.etcd:
        on_node(master, "daemon-util", "activate-master-ip")
    say(f"{master.name}: cluster {state.cluster_name} initialised, master IP "
        f"{state.master_ip} on br0" + (f", config in etcd ({state.etcd})" if state.etcd else ""))
    start_daemons(master, ["noded", *([] if state.etcd else ["confd"]), "masterd"])
    _publish(sim, state)
    _write_profile(master, state)


def _join(state: SimState, master: SimHost, others: list[SimHost], say: Say) -> None:
    """The other nodes: noded without the cluster's secrets makes a join token; the master
    joins each with its token (node certificate, key, ssconf) as it adds it."""
    tokens: dict[str, str] = {}

    def fresh(host: SimHost) -> None:
        start_daemons(host, ["noded"])
        tokens[host.name] = on_node(host, "node", "join-token").strip()

    parallel(others, fresh)
    for host in others:
        on_node(master, "node", "add", host.name, "--ip", host.address,
                "--join-token", tokens[host.name], env=state.node_environment)
    say(f"{master.name}: added {', '.join(h.name for h in others) or 'no other nodes'}")


def _await_live_figures(state: SimState) -> None:
    """Until masterd has every node's live figures: the libvirtds restarted on TLS, and
    masterd keeps a node's failed answer for its cache's lifetime, so an allocation right
    after the start would leave those nodes out."""
    deadline = time.monotonic() + LIVE_FIGURES_TIMEOUT
    missing: list[str] = []
    with state.rapi(timeout=10.0) as rapi:
        while time.monotonic() < deadline:
            try:
                missing = [n["name"] for n in rapi.get_nodes(bulk=True)
                           if n.get("mfree") is None]
            except (RapiError, OSError) as err:
                missing = [str(err)]
            if not missing:
                return
            time.sleep(0.5)
    raise HerderError(f"masterd has no live figures of {', '.join(missing)} "
                      f"{LIVE_FIGURES_TIMEOUT:.0f} s after the start")


def _publish(sim: HostSimulation, state: SimState) -> None:
    """The cluster's ports on the machine's loopback: masterd, maintd and the master's mond on
    the cluster's address (forwarded to the master IP), each node's mond on its own."""
    for port in (ports.MASTERD, ports.MAINTD, ports.MAINTD_NOTIFY, ports.MOND):
        sim.publish(f"{state.published}:{port}", f"{state.master_ip}:{port}")
    for node in state.nodes:
        sim.publish(f"{node.published}:{ports.MOND}", f"{node.address}:{ports.MOND}")


def _write_profile(master: SimHost, state: SimState) -> None:
    """The operator's client profile: the cluster certificate (its public part), a RAPI user's
    password (from the master's users file), masterd's and maintd's published addresses and
    where each node's mond is reached."""
    client_dir = state.client_dir
    client_dir.mkdir(parents=True, exist_ok=True)
    secrets = SecretPaths.beside(DATA_DIR / "config.json")
    pem = master.run(["cat", str(secrets.certificate)], timeout=60).stdout
    certificate = "".join(block for block in _pem_blocks(pem) if "CERTIFICATE" in block)
    if not certificate:
        raise HerderError(f"{master.name}: no certificate in {secrets.certificate}")
    (client_dir / "cluster.pem").write_text(certificate)
    users = master.run(["cat", str(secrets.rapi_users)], timeout=60).stdout
    user, password = _write_user(users)
    password_file = client_dir / "rapi-password"
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)
    client_profile.write(Path(state.profile), client_profile.Profile(
        masterd=state.masterd_url, ca=client_dir / "cluster.pem", user=user,
        password_file=password_file, maintd=state.maintd_url,
        nodes={n.name: n.published for n in state.nodes}))
    _wait_masterd(state)


def _pem_blocks(text: str) -> list[str]:
    blocks, current = [], []
    for line in text.splitlines(keepends=True):
        current.append(line)
        if line.startswith("-----END "):
            blocks.append("".join(current))
            current = []
    return blocks


def _write_user(users: str) -> tuple[str, str]:
    """The first user with the write option of a RAPI users file (and its clear password)."""
    for raw in users.splitlines():
        parts = raw.split()
        if len(parts) >= 3 and not parts[0].startswith("#") and "write" in parts[2].split(","):
            password = parts[1]
            if password.upper().startswith("{CLEARTEXT}"):
                password = password[len("{CLEARTEXT}"):]
            return parts[0], password
    raise HerderError("the master's RAPI users file has no user with the write option")


def _wait_masterd(state: SimState, timeout: float = START_TIMEOUT) -> None:
    """Until masterd answers through the published port."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            with state.rapi(timeout=5.0) as api:
                api.get_info()
                return
        except (RapiError, HerderError) as err:
            last = str(err)
        time.sleep(0.1)
    raise HerderError(f"masterd did not answer at {state.masterd_url} within {timeout:g}s: "
                      f"{last}")


# --- running clusters ----------------------------------------------------------------------


def break_node(directory: Path, node: str, status: str, command: str = "") -> None:
    allowed = ("Ok", "live-repair", "evacuate", "evacuate-failover")
    if status not in allowed:
        raise HerderError(f"status must be one of {', '.join(allowed)}")
    write_diagnose(load_state(directory).host(node), status, command)


def primary_node(state: SimState, instance: str) -> str:
    with state.rapi() as api:
        try:
            return str(api.get_instance(instance)["pnode"])
        except RapiError as err:
            raise HerderError(f"cannot find instance {instance}: {err}") from None


def crash_instance(directory: Path, name: str) -> str:
    """Destroy an instance's domain on its primary node behind herder's back (a crash, as far
    as libvirt's test driver can show one), with virsh on that node; returns the node."""
    state = load_state(directory)
    pnode = primary_node(state, name)
    host = state.host(pnode)
    state_now = host.run(["virsh", "-q", "-c", state.libvirt_uri, "domstate", name],
                         timeout=60)
    if state_now.returncode != 0:
        raise HerderError(f"cannot crash {name}: {state_now.stderr.strip()}")
    if state_now.stdout.strip() != "running":
        raise HerderError(f"{name} is not running on {pnode}")
    done = host.run(["virsh", "-q", "-c", state.libvirt_uri, "destroy", name], timeout=60)
    if done.returncode != 0:
        raise HerderError(f"cannot crash {name}: {done.stderr.strip()}")
    return pnode


def failover(directory: Path, node: str, *, voting: bool = True,
             progress: Say | None = None) -> tuple[SimState, str]:
    """Master failover as Ganeti's operator does it: `herder cluster master-failover` run on
    the new master (the vote, the config change, then through the node daemons the master IP
    and the master daemons moved). Returns the state and the command's output."""
    say = progress or (lambda message: None)
    state = load_state(directory)
    host = state.host(node)
    args = ["cluster", "master-failover", "--yes"]
    if not voting:
        args.append("--no-voting")
    done = host.herder(*args, timeout=300)
    output = (done.stdout + done.stderr).strip()
    say(output)
    if done.returncode != 0:
        raise HerderError(f"master-failover on {host.name} failed: "
                          f"{' | '.join(output.splitlines()[-3:])}")
    _wait_masterd(state)
    return state, output


def stop(directory: Path) -> bool:
    """Tear the simulated cluster in `directory` down; True if there was one. A cluster that
    shares another's network removes its own hosts and ports only."""
    state = SimState.load(directory)
    if state is None:
        from herder.sim.host import teardown

        return teardown(directory, grace=5.0)
    if Path(state.network).resolve() != Path(state.directory).resolve():
        with contextlib.suppress(HerderError):
            sim = state.simulation()
            for port in [state.published, *(n.published for n in state.nodes)]:
                for listen in [p for p in sim.published() if p.startswith(port + ":")]:
                    sim.unpublish(listen)
            sim.remove_hosts([n.name for n in state.nodes if n.name in sim.record.hosts])
            register_cluster(sim, None, forget=state.cluster_name)
            _release_addresses(sim, directory)
    else:
        from herder.sim.host import teardown

        teardown(Path(state.network), grace=5.0)
    with contextlib.suppress(OSError):
        (directory / STATE_FILE).unlink()
    return True

