"""`herder cluster simulate`: a real herder cluster on this machine.

Each node gets its own loopback address (127.0.0.11, .12, ...: Linux accepts binds to any 127/8
address), its own libvirtd serving the test driver on a private socket, its own `herder noded`
(port 1811), `herder mond` (1815) and `herder instmon` (notifying maintd on the master's
port 1817); node 1 is the master and also runs `herder masterd` (5080) and `herder maintd`.
Every daemon is a separate process; the state file `sim.json` lists them so `--stop` tears
everything down. Nodes 1-3 are master candidates; `failover` makes another one the master
(`herder cluster master-failover` as that node, then masterd and maintd there). All nodes share
the config directory, so the new master continues the same job queue and maintd state.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from herder.core.errors import HerderError
from herder.core.store import pid_alive
from herder.sim.libvirtd import LibvirtdUnavailable, start_libvirtd

DOMAIN = "sim.herder.test"
STATE_FILE = "sim.json"
PORTS = {"noded": 1811, "confd": 1814, "mond": 1815, "maintd": 1816, "masterd": 5080}
NOTIFY_PORT = 1817  # maintd's HTTPS port for instmon's notifications
BREAK_SCRIPT = "herder-sim-diagnose"  # the diagnose command a simulated node runs
DIAGNOSE_INTERVAL = 2.0
DEMO_OS = "debootstrap"
DEMO_VARIANTS = ("default", "minimal")
SIM_DISK_MIB = 100 * 1024  # each simulated node offers 100 GiB of (sparse) instance disks


@dataclass
class SimNode:
    name: str
    ip: str
    libvirt_uri: str = ""
    libvirtd_pid: int = 0
    libvirtd_dir: str = ""
    pids: dict[str, int] = field(default_factory=dict)


@dataclass
class SimState:
    directory: str
    config: str
    nodes: list[SimNode]
    masterd_url: str

    def save(self) -> None:
        path = Path(self.directory) / STATE_FILE
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, directory: Path) -> SimState | None:
        try:
            data = json.loads((directory / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        data["nodes"] = [SimNode(**n) for n in data["nodes"]]
        return cls(**data)


def herder(config: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERDER_CONFIG": str(config), "HERDER_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise HerderError(f"herder {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def write_demo_os(directory: Path) -> Path:
    """A small OS definition (API 15/20, with variants) whose create script writes a marker
    on the instance's first disk."""
    os_dir = directory / "os" / DEMO_OS
    os_dir.mkdir(parents=True, exist_ok=True)
    (os_dir / "ganeti_api_version").write_text("20\n15\n")
    (os_dir / "variants.list").write_text("\n".join(DEMO_VARIANTS) + "\n")
    (os_dir / "parameters.list").write_text("packages extra packages to install\n")
    scripts = {
        "create": '#!/bin/sh\nset -e\n[ -n "$DISK_0_PATH" ] && '
                  'printf "herder-demo-os %s %s\\n" "$OS_VARIANT" "$INSTANCE_NAME" '
                  '| dd of="$DISK_0_PATH" conv=notrunc status=none\nexit 0\n',
        "export": "#!/bin/sh\nexit 0\n", "import": "#!/bin/sh\nexit 0\n",
        "rename": "#!/bin/sh\nexit 0\n", "verify": "#!/bin/sh\nexit 0\n",
    }
    for name, body in scripts.items():
        path = os_dir / name
        path.write_text(body)
        path.chmod(0o755)
    return directory / "os"


READY = {"noded": "serving RPC on", "mond": "listening on", "masterd": "serving RAPI on",
         "maintd": "listening on", "confd": "listening on udp"}


def _wait_ready(daemon: str, ip: str, port: int, proc: subprocess.Popen[bytes], log: Path,
                timeout: float = 30.0) -> None:
    """Until the daemon says it listens (its log line, not just an open port: another program
    could hold the address)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if proc.poll() is not None:
            tail = text.strip().splitlines()[-3:]
            raise HerderError(f"{daemon} for {ip}:{port} exited: {' | '.join(tail)}")
        if f"{READY[daemon]}" in text and f"{ip}:{port}" in text:
            return
        time.sleep(0.05)
    raise HerderError(f"{daemon} did not listen on {ip}:{port} within {timeout:g}s")


def spawn_noded(directory: Path, config: Path, node: SimNode) -> subprocess.Popen[bytes]:
    """Start (or restart) a simulated node's noded."""
    node_dir = directory / "nodes" / node.name
    return _spawn(config, node_dir / "noded.log", "noded", "--bind", node.ip, "--port",
                  str(PORTS["noded"]), "--node", node.name, "--libvirt-uri", node.libvirt_uri,
                  "--state-dir", str(node_dir / "noded"), "--run-dir", str(node_dir / "run"),
                  "--powercycle-action", "simulate", "--os-path", str(directory / "os"),
                  "--repair-dir", str(node_dir / "repair"), "--disk-capacity",
                  str(SIM_DISK_MIB), "--file-root", str(node_dir / "root"))


def spawn_instmon(directory: Path, config: Path, node: SimNode,
                  master: SimNode) -> subprocess.Popen[bytes]:
    """Start (or restart) a simulated node's instance monitor; it notifies the master's maintd
    over HTTPS (the cluster certificate, the token derived from the HMAC key)."""
    node_dir = directory / "nodes" / node.name
    return _spawn(config, node_dir / "instmon.log", "instmon", "--node", node.name,
                  "--libvirt-uri", node.libvirt_uri, "--run-dir", str(node_dir / "run"),
                  "--spool-dir", str(node_dir / "instmon-spool"), "--notify-url",
                  f"https://{master.ip}:{NOTIFY_PORT}/1/notifications")


def _wait_instmon(run_dir: Path, proc: subprocess.Popen[bytes], log: Path,
                  timeout: float = 30.0) -> None:
    """Until instmon says (in its state file) that it is connected to libvirt."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise HerderError(f"instmon exited: {' | '.join(tail)}")
        try:
            state = json.loads((run_dir / "instmon.json").read_text())
        except (OSError, ValueError):
            state = {}
        if state.get("pid") == proc.pid and state.get("connected"):
            return
        time.sleep(0.05)
    raise HerderError(f"instmon did not connect to libvirt within {timeout:g}s")


def _remove_default_domain(uri: str) -> None:
    """The test driver starts with a running domain "test" that is no instance of ours; noded
    holds a connection now, so removing it lasts."""
    import libvirt

    conn = libvirt.open(uri)
    try:
        for dom in conn.listAllDomains():
            if dom.name() == "test":
                if dom.isActive():
                    dom.destroy()
                dom.undefine()
    finally:
        conn.close()


def _spawn(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HERDER_CONFIG": str(config)}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "herder.cli.main", *args], env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def write_diagnose(directory: Path, node: str, status: str = "Ok",
                   command: str = "") -> Path:
    """The simulated node's self-diagnose script (white-listed: root-owned, mode 755): it
    prints `status`. `herder cluster simulate --break NODE evacuate` uses it."""
    return diagnose_script(directory / "nodes" / node / "diagnose" / BREAK_SCRIPT,
                           {"status": status, "command": command,
                            "details": {"simulated": True, "since": int(time.time())}
                            if status != "Ok" else {}})


def diagnose_script(path: Path, data: dict[str, object]) -> Path:
    """Replace `path` (atomically) with a self-diagnose command printing `data` as JSON, mode
    0755 (white-listed when its owner is root, as the writer is here)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(data)}\nEOF\n")
    tmp.chmod(0o755)
    tmp.replace(path)
    return path


def break_node(directory: Path, node: str, status: str, command: str = "") -> None:
    state = SimState.load(directory)
    if state is None:
        raise HerderError(f"no simulated cluster is running in {directory}")
    match = _sim_node(state, node)
    allowed = ("Ok", "live-repair", "evacuate", "evacuate-failover")
    if status not in allowed:
        raise HerderError(f"status must be one of {', '.join(allowed)}")
    write_diagnose(directory, match.name, status, command)


def crash_instance(directory: Path, name: str) -> str:
    """Destroy an instance's domain on its primary node from outside herder (a crash, as far
    as libvirt's test driver can show one); returns the node's name."""
    import libvirt

    from herder.core.store import FileStore

    state = SimState.load(directory)
    if state is None:
        raise HerderError(f"no simulated cluster is running in {directory}")
    config = FileStore(Path(state.config)).load()
    inst = config.find_instance(name)  # NotFound (a HerderError) names what is missing
    pnode = config.nodes[inst.primary_node].name
    node = next(n for n in state.nodes if n.name == pnode)
    conn = libvirt.open(node.libvirt_uri)
    try:
        dom = conn.lookupByName(inst.name)
        if not dom.isActive():
            raise HerderError(f"{inst.name} is not running on {pnode}")
        dom.destroy()
    except libvirt.libvirtError as err:
        raise HerderError(f"cannot crash {inst.name}: {err.get_error_message()}") from None
    finally:
        conn.close()
    return pnode


def start(directory: Path, nodes: int = 3, *, mond: bool = True, maintd: bool = True,
          first_ip: int = 11, progress: object = None, domain: str = DOMAIN) -> SimState:
    """Bring up a simulated cluster of `nodes` nodes in `directory` (replacing any there);
    `domain` names the cluster and its nodes (two clusters to merge need different ones)."""
    if not 1 <= nodes <= 200:
        raise HerderError("a simulated cluster has 1 to 200 nodes")
    if first_ip + nodes > 255:
        raise HerderError("not enough loopback addresses for that many nodes")
    stop(directory)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    config = directory / "cluster" / "config.json"
    say = progress if callable(progress) else (lambda message: None)
    sim_nodes = [SimNode(f"node{i}.{domain}", f"127.0.0.{first_ip + i - 1}")
                 for i in range(1, nodes + 1)]
    master = sim_nodes[0]
    herder(config, "cluster", "init", f"cluster.{domain}", "--master-node", master.name,
           "--primary-ip", master.ip, "--enabled-disk-templates", "drbd,plain,file,diskless",
           "--enabled-hypervisors", "fake",
           "--default-iallocator", "herder")
    for node in sim_nodes[1:]:
        herder(config, "node", "add", node.name, "--ip", node.ip, "--secondary-ip", node.ip)
    for node in sim_nodes[1:3]:
        herder(config, "node", "modify", node.name, "--master-candidate", "yes")
    storage = directory / "storage"
    for kind in ("file", "shared-file"):
        (storage / kind).mkdir(parents=True)
    # herder has no cluster option for the storage dirs yet: set them in the fresh config.
    from herder.core.store import FileStore

    with FileStore(config).update() as cfg:
        cfg.cluster.file_storage_dir = str(storage / "file")
        cfg.cluster.shared_file_storage_dir = str(storage / "shared-file")
    write_demo_os(directory)
    if mond:
        for node in sim_nodes:
            write_diagnose(directory, node.name)
        herder(config, "cluster", "modify", "--diagnose-data-collector-filename", BREAK_SCRIPT,
               "--data-collector", f"diagnose:interval={DIAGNOSE_INTERVAL}")
    state = SimState(str(directory), str(config), sim_nodes,
                     f"https://{master.ip}:{PORTS['masterd']}")
    try:
        for node in sim_nodes:
            node_dir = directory / "nodes" / node.name
            node_dir.mkdir(parents=True, exist_ok=True)
            try:
                libvirtd = start_libvirtd()
            except LibvirtdUnavailable as err:
                raise HerderError(f"cannot start a libvirtd for {node.name}: {err}") from None
            assert libvirtd.proc is not None
            node.libvirt_uri, node.libvirtd_pid = libvirtd.uri, libvirtd.proc.pid
            node.libvirtd_dir = str(libvirtd.workdir)
            state.save()
            herder(config, "node", "modify", node.name, "--node-parameters",
                   f"libvirt_uri={node.libvirt_uri}")
            proc = spawn_noded(directory, config, node)
            noded_log = node_dir / "noded.log"
            node.pids["noded"] = proc.pid
            state.save()
            _wait_ready("noded", node.ip, PORTS["noded"], proc, noded_log)
            _remove_default_domain(node.libvirt_uri)
            say(f"{node.name}: noded on {node.ip}:{PORTS['noded']}, libvirt {node.libvirt_uri}")
            if mond:
                mond_log = node_dir / "mond.log"
                proc = _spawn(config, mond_log, "mond", "--bind", node.ip, "--port",
                              str(PORTS["mond"]), "--node", node.name, "--run-dir",
                              str(node_dir / "run"), "--libvirt-uri", node.libvirt_uri,
                              "--plugin-dir", str(node_dir / "plugins"), "--diagnose-dir",
                              str(node_dir / "diagnose"), "--collector-timeout", "10")
                node.pids["mond"] = proc.pid
                state.save()
                _wait_ready("mond", node.ip, PORTS["mond"], proc, mond_log)
            if mond and maintd:
                proc = spawn_instmon(directory, config, node, master)
                node.pids["instmon"] = proc.pid
                state.save()
                _wait_instmon(node_dir / "run", proc, node_dir / "instmon.log")
        for node in sim_nodes[:3]:  # the master candidates run confd (design-2.1)
            node_dir = directory / "nodes" / node.name
            confd_log = node_dir / "confd.log"
            proc = _spawn(config, confd_log, "confd", "--bind", node.ip, "--port",
                          str(PORTS["confd"]), "--run-dir", str(node_dir / "run"))
            node.pids["confd"] = proc.pid
            state.save()
            _wait_ready("confd", node.ip, PORTS["confd"], proc, confd_log)
        start_master_daemons(state, master, maintd=maintd and mond, say=say)
    except BaseException:
        stop(directory)
        raise
    return state


def spawn_masterd(directory: Path, config: Path, node: SimNode) -> subprocess.Popen[bytes]:
    """Start masterd as `node` (it exits with code 11 unless the config names it master)."""
    node_dir = directory / "nodes" / node.name
    return _spawn(config, node_dir / "masterd.log", "masterd", "--bind", node.ip, "--port",
                  str(PORTS["masterd"]), "--run-dir", str(node_dir / "run"), "--node", node.name)


def start_master_daemons(state: SimState, master: SimNode, *, maintd: bool,
                         say: Any = None) -> None:
    """masterd (and maintd) on the master node; the RAPI URL becomes the master's."""
    say = say if callable(say) else (lambda message: None)
    directory, config = Path(state.directory), Path(state.config)
    master_dir = directory / "nodes" / master.name
    proc = spawn_masterd(directory, config, master)
    master.pids["masterd"] = proc.pid
    state.masterd_url = f"https://{master.ip}:{PORTS['masterd']}"
    state.save()
    _wait_ready("masterd", master.ip, PORTS["masterd"], proc, master_dir / "masterd.log")
    say(f"{master.name}: masterd on {state.masterd_url}")
    if maintd:
        maintd_log = master_dir / "maintd.log"
        proc = _spawn(config, maintd_log, "maintd", "--bind", master.ip, "--port",
                      str(PORTS["maintd"]), "--node", master.name, "--round-delay", "1",
                      "--poll-interval", "1", "--run-dir", str(master_dir / "run"))
        master.pids["maintd"] = proc.pid
        state.save()
        _wait_ready("maintd", master.ip, PORTS["maintd"], proc, maintd_log)
        say(f"{master.name}: maintd on http://{master.ip}:{PORTS['maintd']}/status.html")


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # our child, now reaped
    return pid_alive(pid)


def failover(directory: Path, node: str, *, voting: bool = True,
             progress: Any = None) -> tuple[SimState, str]:
    """Master failover in the simulated cluster: `herder cluster master-failover` as `node`
    (with the nodes' vote unless `voting` is false), then masterd (and maintd, when the old
    master ran one) on `node`; the old master's maintd is stopped, every instmon is pointed at
    the new master, and sim.json updated. Returns the state and the command's output."""
    say = progress if callable(progress) else (lambda message: None)
    state = SimState.load(directory)
    if state is None:
        raise HerderError(f"no simulated cluster is running in {directory}")
    new = _sim_node(state, node)
    config = Path(state.config)
    old = next((n for n in state.nodes if "masterd" in n.pids or "maintd" in n.pids), None)
    args = ["cluster", "master-failover", "--node", new.name, "--yes"]
    if not voting:
        args.append("--no-voting")
    done = herder(config, *args)
    output = (done.stdout + done.stderr).strip()
    say(output)
    had_maintd = old is not None and "maintd" in old.pids
    if old is not None and old is not new:
        if "maintd" in old.pids:
            _kill(old.pids.pop("maintd"), group=True)
        if "masterd" in old.pids and not _alive(old.pids["masterd"]):
            old.pids.pop("masterd")  # its successor (if restarted) exits with code 11
        state.save()
    start_master_daemons(state, new, maintd=had_maintd, say=say)
    for sim_node in state.nodes:
        if "instmon" in sim_node.pids:
            _kill(sim_node.pids["instmon"], group=True)
            proc = spawn_instmon(directory, config, sim_node, new)
            sim_node.pids["instmon"] = proc.pid
            state.save()
            node_dir = directory / "nodes" / sim_node.name
            _wait_instmon(node_dir / "run", proc, node_dir / "instmon.log")
    return state, output


def _sim_node(state: SimState, node: str) -> SimNode:
    names = {n.name: n for n in state.nodes}
    match = names.get(node) or next((n for n in state.nodes if n.name.split(".")[0] == node),
                                    None)
    if match is None:
        raise HerderError(f"no node {node!r} in the simulated cluster "
                          f"({', '.join(sorted(names))})")
    return match


def _kill(pid: int, group: bool = False) -> None:
    if pid <= 0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, signal.SIGTERM)
        else:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)


def stop(directory: Path) -> bool:
    """Stop every process of the simulation in `directory`; True if one was running."""
    state = SimState.load(directory)
    if state is None:
        return False
    for node in state.nodes:
        for pid in node.pids.values():
            _kill(pid, group=True)
    for node in state.nodes:
        _kill(node.libvirtd_pid, group=True)
        if node.libvirtd_dir:
            shutil.rmtree(node.libvirtd_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        (directory / STATE_FILE).unlink()
    return True


class MergeControl:
    """The simulator's daemons for `herder cluster merge` (`herder.masterd.merge.Control`): the
    other cluster is a simulation whose `sim.json` lies beside its `cluster/` directory."""

    def __init__(self, master_ip: str) -> None:
        self.master_ip = master_ip  # the merging (this) cluster's master: instmon notifies it
        self.had_maintd = False

    @staticmethod
    def _state(other_config: Path) -> SimState:
        state = SimState.load(Path(other_config).parent.parent)
        if state is None:
            raise HerderError(f"{other_config} is not the config of a running simulated cluster")
        return state

    def stop_master_daemons(self, other_config: Path) -> list[str]:
        state = self._state(other_config)
        stopped = []
        for node in state.nodes:
            for daemon in ("maintd", "masterd"):
                if daemon in node.pids:
                    self.had_maintd = self.had_maintd or daemon == "maintd"
                    _kill(node.pids.pop(daemon), group=True)
                    stopped.append(f"{daemon} on {node.name}")
        state.save()
        return stopped

    def start_master_daemons(self, other_config: Path) -> None:
        from herder.core.store import FileStore

        state = self._state(other_config)
        current = FileStore(other_config).load().master
        if current is None:
            raise HerderError(f"{other_config} names no master node")
        master = _sim_node(state, current.name)
        for daemon in ("masterd", "maintd"):  # the ready lines to wait for are the new ones
            log = Path(state.directory) / "nodes" / master.name / f"{daemon}.log"
            with contextlib.suppress(OSError):
                log.replace(log.with_name(f"{daemon}.log.before-merge"))
        start_master_daemons(state, master, maintd=self.had_maintd)

    def adopt_nodes(self, other_config: Path, config: Path) -> None:
        """Restart the other cluster's noded, mond and instmon with `config` (this cluster's
        key and certificate; the node's master epoch record starts afresh, as on a node that
        joins), and stop its confd (its nodes are no master candidates here)."""
        state = self._state(other_config)
        directory = Path(state.directory)
        master = SimNode("master", self.master_ip)
        for node in state.nodes:
            node_dir = directory / "nodes" / node.name
            for daemon in ("confd", "noded"):  # mond and instmon keep libvirt's test driver
                if daemon in node.pids:           # alive (it resets without a connection)
                    _kill(node.pids[daemon], group=True)
            node.pids.pop("confd", None)
            with contextlib.suppress(OSError):
                (node_dir / "noded" / "master-epoch").unlink()
            with contextlib.suppress(OSError):  # the ready line to wait for is the new one
                (node_dir / "noded.log").replace(node_dir / "noded.log.before-merge")
            proc = spawn_noded(directory, config, node)
            node.pids["noded"] = proc.pid
            state.save()
            _wait_ready("noded", node.ip, PORTS["noded"], proc, node_dir / "noded.log")
            _remove_default_domain(node.libvirt_uri)
            if "mond" in node.pids:
                _kill(node.pids["mond"], group=True)
                proc = _spawn(config, node_dir / "mond.log", "mond", "--bind", node.ip,
                              "--port", str(PORTS["mond"]), "--node", node.name, "--run-dir",
                              str(node_dir / "run"), "--libvirt-uri", node.libvirt_uri,
                              "--plugin-dir", str(node_dir / "plugins"), "--diagnose-dir",
                              str(node_dir / "diagnose"), "--collector-timeout", "10")
                node.pids["mond"] = proc.pid
                state.save()
            if "instmon" in node.pids:
                _kill(node.pids["instmon"], group=True)
                proc = spawn_instmon(directory, config, node, master)
                node.pids["instmon"] = proc.pid
                state.save()
        state.config = str(config)
        state.save()
