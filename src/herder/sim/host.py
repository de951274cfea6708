"""Namespaced simulated hosts (docs/real-nodes.md §1): every simulated node a host of its own.

A host is a process tree in its own PID, mount, network, UTS and IPC namespaces, whose PID 1 is
`herder supervise` (after `herder.sim.hostinit` has set it up). Its host name is its node name.
Private to it, bind-mounted from its directory `<sim>/nodes/<name>/root/...`: /run (so
/run/herder, /run/lvm, /run/libvirt and /run/lock), /tmp, /var/lib/herder, /etc/herder,
/var/log/herder, /srv, /etc/lvm, /etc/libvirt, /var/lib/libvirt, /var/cache/libvirt,
/var/log/libvirt, /dev/disk, /etc/pki (libvirt's default TLS paths); a tmpfs on /dev/shm; its
file storage is its own ext4 on a loop device at /srv/herder/file-storage; its volume group
lives on another loop device, which its LVM alone sees. Shared by all hosts: /etc/hosts
(`<sim>/hosts`, the cluster's DNS), /srv/herder/shared-file-storage
(`<sim>/shared/file-storage`, the NFS stand-in) and the `sharedimg` ExtStorage provider's images
/srv/herder/sharedimg (`<sim>/shared/sharedimg`, the SAN stand-in; the provider itself is
installed in /srv/ganeti/extstorage, and Ganeti's allowed-paths file
/etc/ganeti/file-storage-paths names the two file-storage directories). Nothing else passes
between hosts but the network (`herder.sim.netns`); the machine reaches them only through
published ports (`herder.sim.forward`).

The simulation's record (`herder.sim.hoststate`) names everything it made before it is made, so
`teardown(directory)` removes it all even after the simulator crashed: each host's PID 1 (the
kernel ends the rest of its namespace with it, and its mounts go with the namespace), the loop
devices, the forwarder, the network namespace.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

import herder
from herder.core import libvirtd_conf, supervise_control
from herder.core.errors import HerderError
from herder.sim import debhost, debroot, forward, hostfiles, hoststate, loopdev, netns, procgroup
from herder.sim import watchdog as sim_watchdog
from herder.sim.hostinit import HostSpec, Mount
from herder.sim.libvirtd import LIBVIRTD, ensure_system_accounts

# The host's private directories, bind-mounted in this order.
PRIVATE_DIRS = ("/run", "/tmp", "/var/lib/herder", "/etc/herder", "/var/log/herder", "/srv",
                "/etc/lvm", "/etc/libvirt", "/var/lib/libvirt", "/var/cache/libvirt",
                "/var/log/libvirt", "/dev/disk", "/etc/ganeti", "/etc/ceph", "/etc/pki")
# Inside the private /run: herder's, LVM's and libvirt's runtime directories, lock files.
RUN_DIRS = ("herder", "lvm", "libvirt", "lock", "lock/lvm")
FILE_STORAGE = "/srv/herder/file-storage"
SHARED_FILE_STORAGE = "/srv/herder/shared-file-storage"
# The sharedimg ExtStorage provider's images (its default directory), shared by all hosts.
SHARED_IMAGES = "/srv/herder/sharedimg"
# Ganeti's allowed-paths file for file storage, and where a host's ExtStorage providers are.
FILE_STORAGE_PATHS = "/etc/ganeti/file-storage-paths"
EXTSTORAGE_DIR = "/srv/ganeti/extstorage"
SUPERVISE_SOCKET = "/run/herder/supervise.sock"
NODE_SETTINGS = "/etc/herder/node.toml"
MIB = 1 << 20
BOOT_TIMEOUT = 60.0
# The simulation's lock for starting its forwarder and keeper (`<sim>/daemons.lock`)
DAEMONS_LOCK = "daemons.lock"
STOP_GRACE = 10.0  # SIGTERM to a host's PID 1 (its supervisor stops its daemons), then SIGKILL
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class HostConfig:
    """What a new host gets: its name and address, /etc/herder/node.toml, its disks."""

    name: str
    address: str
    node_settings: str = field(default_factory=hostfiles.node_toml)
    volume_group: str = "xenvg"
    vg_mib: int = 100 * 1024
    file_storage_mib: int = 10 * 1024
    kind: str = "namespace"  # or "debian": a systemd-nspawn Debian host (herder.sim.debhost)


@dataclass(frozen=True)
class HostLayout:
    """A host's directory as the machine sees it."""

    directory: Path

    @property
    def root(self) -> Path:
        return self.directory / "root"

    @property
    def console(self) -> Path:
        """PID 1's output: hostinit, then the supervisor's log."""
        return self.directory / "console.log"

    @property
    def spec(self) -> Path:
        return self.directory / "host.json"

    @property
    def vg_image(self) -> Path:
        return self.directory / "disks" / "vg.img"

    @property
    def file_storage_image(self) -> Path:
        return self.directory / "disks" / "file-storage.img"

    def source(self, inside: str) -> Path:
        """Where a path under one of the private directories lives on the machine."""
        return self.root / inside.lstrip("/")


def node_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of processes on a host: a plain root login's, with this herder on
    PATH and its package first on PYTHONPATH (so the code under test runs there)."""
    env = {"PATH": f"{os.path.dirname(sys.executable)}:{PATH}", "LANG": "C.UTF-8",
           "HOME": "/root", "LVM_SUPPRESS_FD_WARNINGS": "1"}
    # The hosts run the simulator's own herder, wherever it was imported from.
    paths = [str(Path(herder.__file__).resolve().parents[1])]
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(":") if p and p not in paths]
    env["PYTHONPATH"] = ":".join(paths)
    return {**env, **(extra or {})}


def code_paths() -> list[str]:
    """What a host must see of this machine to run the simulator's own herder: the package's
    source tree, the virtualenv and the interpreter's installation, PYTHONPATH's entries and
    every other directory on the import path (a `.pth` file's, e.g. a virtualenv that borrows
    another's libraries)."""
    found = [Path(herder.__file__).resolve().parents[1], Path(sys.prefix), Path(sys.base_prefix),
             Path(sys.executable).resolve().parent]
    found += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    found += [Path(p) for p in sys.path if p and os.path.isabs(p)]
    return sorted({str(p.absolute()) for p in found if p.is_dir()})


def hidden_code_paths(paths: Iterable[str], private: Sequence[str] = PRIVATE_DIRS) -> list[str]:
    """Those of `paths` that one of the host's private directories would cover (a checkout
    under /tmp: the host's /tmp is its own), outermost only: each is bound into the host at
    the same path, so the host runs this herder wherever its checkout is."""
    def covered(path: str) -> bool:
        return any(path == d or path.startswith(d + "/") for d in private)

    chosen: list[str] = []
    for path in sorted(p for p in paths if covered(p)):
        if not any(path == c or path.startswith(c + "/") for c in chosen):
            chosen.append(path)
    return chosen


def herder_argv(*args: str) -> list[str]:
    """`herder ARGS` with this interpreter (as installed on a host)."""
    return [sys.executable, "-m", "herder.cli.main", *args]


REQUIRED_TOOLS = ("unshare", "nsenter", "ip", "losetup", "mkfs.ext4", "mount", "pvcreate",
                  "vgcreate")


def unsupported() -> str | None:
    """Why this machine cannot run namespaced hosts (None: it can)."""
    if os.geteuid() != 0:
        return "namespaced hosts need root"
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"namespaced hosts need {', '.join(missing)}"
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount", "--net", "--uts", "--ipc",
                            "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot create namespaces here: {probe.stderr.strip()}"
    return None


def prepare_machine() -> None:
    """What the machine needs once. The private directories must exist to be mounted over;
    the ones a herder host has anyway (/etc/herder, /var/lib/herder, /var/log/herder,
    /dev/disk) are created, empty, as installing herder would, and never removed again
    (removing a directory that is a mount point in a running host's namespace would unmount it
    there). /etc/ganeti holds the white-lists of Ganeti's paths herder keeps (the self-diagnose
    and repair commands). A system-mode libvirtd needs the accounts of Debian's QEMU driver."""
    for path in PRIVATE_DIRS:
        os.makedirs(path, exist_ok=True)
    if os.access(LIBVIRTD, os.X_OK):
        try:
            ensure_system_accounts()
        except (OSError, subprocess.CalledProcessError) as err:
            raise HerderError(f"cannot create the accounts libvirtd needs: {err}") from None


def terminate(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """End a command `SimHost.popen` started (and what it started in its process group):
    SIGTERM, SIGKILL after `grace` seconds."""
    for signum in (signal.SIGTERM, signal.SIGKILL) if grace > 0 else (signal.SIGKILL,):
        procgroup.signal_group(proc, signum)  # not a recycled pid's group
        try:
            proc.wait(timeout=grace if signum == signal.SIGTERM else 10.0)
            return
        except subprocess.TimeoutExpired:
            continue


def _console_tail(layout: HostLayout, lines: int = 5) -> str:
    try:
        text = layout.console.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no console output)"
    return " | ".join(text[-lines:]) or "(no console output)"


def _run(argv: Sequence[str], what: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise HerderError(f"{what}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


class SimHost:
    """One simulated host: power it on and off, run commands on it, ask its supervisor."""

    def __init__(self, sim: HostSimulation, name: str) -> None:
        self.sim = sim
        self.name = name
        self._unshare: subprocess.Popen[bytes] | None = None

    @property
    def record(self) -> hoststate.HostRecord:
        record = hoststate.load(self.sim.index)
        if record is None or self.name not in record.hosts:
            raise HerderError(f"no simulated host {self.name}")
        return record.hosts[self.name]

    @property
    def address(self) -> str:
        return self.record.address

    @property
    def layout(self) -> HostLayout:
        return HostLayout(Path(self.record.directory))

    @property
    def pid(self) -> int:
        """PID 1 of the host, as the machine sees it."""
        init = self.record.init
        if not hoststate.alive(init):
            raise HerderError(f"host {self.name} is not running")
        assert init is not None
        return init.pid

    @property
    def running(self) -> bool:
        return hoststate.alive(self.record.init)

    def path(self, inside: str) -> Path:
        """Where the machine finds a path of the host: its directory for the private ones
        and the shared directory, else (its file storage) through /proc/<pid 1>/root."""
        if inside == SHARED_FILE_STORAGE or inside.startswith(SHARED_FILE_STORAGE + "/"):
            return self.sim.shared_dir / inside[len(SHARED_FILE_STORAGE):].lstrip("/")
        if inside == SHARED_IMAGES or inside.startswith(SHARED_IMAGES + "/"):
            return self.sim.shared_images_dir / inside[len(SHARED_IMAGES):].lstrip("/")
        if self.debian:  # its whole root is the overlay, but for its /run (a tmpfs) and
            # its file storage (a file system of its own, mounted in the host's namespace)
            if any(inside == d or inside.startswith(d + "/") for d in ("/run", FILE_STORAGE)):
                return Path(f"/proc/{self.pid}/root") / inside.lstrip("/")
            return self.layout.root / inside.lstrip("/")
        if inside == FILE_STORAGE or inside.startswith(FILE_STORAGE + "/"):
            return Path(f"/proc/{self.pid}/root") / inside.lstrip("/")
        if any(inside == d or inside.startswith(d + "/") for d in PRIVATE_DIRS):
            return self.layout.source(inside)
        raise HerderError(f"{inside} is not one of {self.name}'s own paths")

    # --- commands on the host -------------------------------------------------------------

    @property
    def debian(self) -> bool:
        """A Debian host (systemd-nspawn, herder installed from the wheel)?"""
        return self.record.kind == "debian"

    def nsenter_argv(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs `argv` inside the host, as ssh would."""
        if self.debian:
            return debhost.nsenter_argv(self.pid, argv)
        return ["nsenter", f"--target={self.pid}", "--all", "--", *argv]

    def herder_argv(self, *args: str) -> list[str]:
        """`herder ARGS` as the host has it: the simulator's own herder on a namespace host,
        the installed wheel's (/usr/local/sbin/herder) on a Debian host."""
        return ["herder", *args] if self.debian else herder_argv(*args)

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float = 60.0,
            env: Mapping[str, str] | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a command inside the host; its output as text. On timeout the command is
        killed (with whatever it started in its process group) and TimeoutExpired raised."""
        with self.popen(argv, env=env, stdin=subprocess.PIPE if input is not None else
                        subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True) as proc:
            try:
                stdout, stderr = proc.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                terminate(proc, grace=0)
                raise
        done = subprocess.CompletedProcess(list(argv), proc.returncode, stdout, stderr)
        if check and done.returncode != 0:
            raise HerderError(f"{self.name}: {' '.join(argv)} failed with "
                              f"{done.returncode}: {done.stderr.strip()}")
        return done

    def popen(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a command inside the host, in a process group of its own: `terminate(proc)`
        ends it (nsenter passes no signal on to the command it runs)."""
        if self.debian:  # a login's environment there, not this machine's
            return subprocess.Popen(debhost.nsenter_argv(self.pid, argv, env), cwd="/",
                                    start_new_session=True, **kwargs)
        return subprocess.Popen(self.nsenter_argv(argv), env=node_environment(env), cwd="/",
                                start_new_session=True, **kwargs)

    def herder(self, *args: str, timeout: float = 120.0,
               check: bool = False) -> subprocess.CompletedProcess[str]:
        """`herder ARGS` on the host."""
        return self.run(self.herder_argv(*args), timeout=timeout, check=check)

    def supervisor(self, command: supervise_control.Command, daemons: Sequence[str] = (),
                   timeout: float = 120.0) -> supervise_control.Reply:
        """Ask the host's supervisor (start/stop/restart/status), from the machine."""
        return supervise_control.request(Path(f"/proc/{self.pid}/root{SUPERVISE_SOCKET}"),
                                         command, daemons, timeout)

    # --- life cycle -------------------------------------------------------------------

    def provision(self, config: HostConfig) -> None:
        """The host's directory, files and disks (once, before its first boot)."""
        if config.kind == "debian":
            self._provision_debian(config)
            return
        layout = self.layout
        root = layout.root
        for inside in PRIVATE_DIRS:
            layout.source(inside).mkdir(parents=True, exist_ok=True)
        for sub in RUN_DIRS:
            (root / "run" / sub).mkdir(parents=True, exist_ok=True)
        for inside in (FILE_STORAGE, SHARED_FILE_STORAGE, SHARED_IMAGES, "/dev/disk/by-id"):
            layout.source(inside).mkdir(parents=True, exist_ok=True)
        layout.source(FILE_STORAGE_PATHS).write_text(f"{FILE_STORAGE}\n{SHARED_FILE_STORAGE}\n")
        shutil.copytree(Path(__file__).parent / "extstorage" / "sharedimg",
                        layout.source(f"{EXTSTORAGE_DIR}/sharedimg"), dirs_exist_ok=True)
        for sticky in ("tmp", "run/lock"):
            (root / sticky).chmod(0o1777)
        layout.source(NODE_SETTINGS).write_text(config.node_settings)
        layout.source("/etc/libvirt/libvirtd.conf").write_text(hostfiles.libvirtd_conf())
        layout.source("/etc/libvirt/qemu.conf").write_text(libvirtd_conf.qemu_conf())
        layout.vg_image.parent.mkdir(parents=True, exist_ok=True)
        with open(layout.vg_image, "wb") as sparse:
            sparse.truncate(config.vg_mib * MIB)
        self._make_file_storage(config.file_storage_mib)
        images = [layout.vg_image, layout.file_storage_image]
        with hoststate.update(self.sim.index) as record:
            record.hosts[self.name].images = [loopdev.file_identity(p) for p in images]
        loops = []
        for image in images:
            loops.append(loopdev.attach(image))
            with hoststate.update(self.sim.index) as record:
                record.hosts[self.name].loops = list(loops)
        layout.source("/etc/lvm/lvm.conf").write_text(hostfiles.lvm_conf([loops[0]]))

    def _make_file_storage(self, mib: int) -> None:
        """The file storage's own ext4 in a sparse image of `mib` MiB (its bound: a full file
        storage fills this file system, never the machine's)."""
        image = self.layout.file_storage_image
        image.parent.mkdir(parents=True, exist_ok=True)
        with open(image, "wb") as sparse:
            sparse.truncate(mib * MIB)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", "file-storage", "-E",
              "nodiscard,lazy_itable_init=1,lazy_journal_init=1", str(image)],
             f"cannot make {self.name}'s file storage")

    def _provision_debian(self, config: HostConfig) -> None:
        """A Debian host: the cached root under an overlay of its own, installed by the
        guide's script (herder from the wheel, units enabled); then the test bed's stand-ins
        for what this machine lacks (docs/compat.md N5a): the file storage a file system of
        its own (as on a namespace host: an ext4 image on a loop device, mounted for the
        container at every boot: `debhost.boot_argv`) with Ganeti's allowed-paths file, the shared
        storage directories, and the sharedimg ExtStorage provider (the SAN stand-in)."""
        layout = self.layout  # (read before the record's lock: reading it takes the lock)
        self._make_file_storage(config.file_storage_mib)
        identity = loopdev.file_identity(layout.file_storage_image)
        with hoststate.update(self.sim.index) as record:  # teardown finds its loop device
            record.hosts[self.name].images = [identity]
        loop = loopdev.attach(layout.file_storage_image)
        with hoststate.update(self.sim.index) as record:
            record.hosts[self.name].loops = [loop]
        root = debhost.mount_overlay(
            debhost.layers(debroot.ensure_root(), debhost.build_wheelhouse(self.sim.directory)),
            layout.directory)
        debhost.name_host(root, self.name)
        # /etc/herder: where the BMC stand-in's OOB settings go (herder.sim.bmc)
        for inside in (FILE_STORAGE, SHARED_FILE_STORAGE, SHARED_IMAGES, "/etc/ganeti",
                       "/etc/herder"):
            (root / inside.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (layout.directory / debhost.FILE_STORAGE_MOUNT).mkdir(exist_ok=True)
        (root / FILE_STORAGE_PATHS.lstrip("/")).write_text(
            f"{FILE_STORAGE}\n{SHARED_FILE_STORAGE}\n")
        shutil.copytree(Path(__file__).parent / "extstorage" / "sharedimg",
                        root / EXTSTORAGE_DIR.lstrip("/") / "sharedimg", dirs_exist_ok=True)

    def _power_on_debian(self, timeout: float) -> None:
        """Boot a Debian host: systemd-nspawn, its network plugged while systemd starts;
        returns once systemd has finished booting (herder.target's units started)."""
        layout = self.layout
        # the watchdog device (herder.sim.watchdog): the keeper's FIFO, made here where the
        # keeper looks for it, bound into the container's /run (a tmpfs of nspawn's)
        device = sim_watchdog.device_path(self.record)
        if not stat.S_ISFIFO(device.lstat().st_mode if device.exists() else 0):
            device.unlink(missing_ok=True)
            os.mkfifo(device, 0o600)
        argv = debhost.boot_argv(layout.root, self.name, self.sim.hosts_file, binds=(
            f"{self.sim.shared_dir}:{SHARED_FILE_STORAGE}",
            f"{self.sim.shared_images_dir}:{SHARED_IMAGES}",
            f"{device}:{sim_watchdog.DEVICE}"), binds_ro=tuple(
                f"{d}:{d}" for d in (debhost.GUEST_IMAGES,) if d.is_dir()),
            machine=debhost.machine_name(self.name, self.sim.index, self.record.slot),
            file_storage=(self.record.loops[0], layout.directory / debhost.FILE_STORAGE_MOUNT))
        with open(layout.console, "ab") as console:
            self._unshare = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console,
                                             stderr=subprocess.STDOUT, start_new_session=True,
                                             cwd="/")
        nspawn = hoststate.process_record(self._unshare.pid)
        with hoststate.update(self.sim.index) as record:
            record.hosts[self.name].unshare = nspawn
        try:
            init = hoststate.process_record(debhost.leader(nspawn.pid))
        except HerderError:
            raise HerderError(f"host {self.name} did not start: "
                              f"{_console_tail(layout)}") from None
        with hoststate.update(self.sim.index) as record:
            record.hosts[self.name].init = init
        try:
            netns.plug(self.sim.index, self.record.slot, init.pid, self.address)
            debhost.wait_booted(init.pid, timeout)
        except HerderError as err:
            self.power_off(grace=0)
            raise HerderError(f"host {self.name}: {err}: {_console_tail(layout)}") from None

    def _spec(self, ready_fd: int) -> HostSpec:
        layout, record = self.layout, self.record
        mounts = [Mount("bind", inside, str(layout.source(inside))) for inside in PRIVATE_DIRS]
        mounts += [
            Mount("bind", "/etc/hosts", str(self.sim.hosts_file)),
            Mount("bind", SHARED_FILE_STORAGE, str(self.sim.shared_dir)),
            Mount("bind", SHARED_IMAGES, str(self.sim.shared_images_dir)),
            Mount("ext4", FILE_STORAGE, record.loops[1], "noinit_itable"),
            Mount("tmpfs", "/dev/shm", options="mode=1777"),
        ]
        for path in hidden_code_paths(code_paths()):
            layout.source(path).mkdir(parents=True, exist_ok=True)  # the mount point
            mounts.append(Mount("bind", path, path))
        return HostSpec(hostname=self.name, mounts=mounts, volume_group=record.volume_group,
                        vg_device=record.loops[0], ready_fd=ready_fd,
                        argv=herder_argv("supervise", "--settings", NODE_SETTINGS),
                        environment=node_environment())

    def power_on(self, timeout: float = BOOT_TIMEOUT) -> None:
        """Boot the host: namespaces, mounts, network; returns once its supervisor answers."""
        if self.running:
            return
        if self._unshare is not None and self._unshare.poll() is not None:
            self._unshare = None  # reaped: the host ended its namespace itself
        with hoststate.update(self.sim.index) as wished:
            wished.hosts[self.name].powered = True
        if self.debian:
            self._power_on_debian(max(timeout, debhost.BOOT_TIMEOUT))
            return
        layout = self.layout
        ready_read, ready_write = os.pipe()
        try:
            layout.spec.write_bytes(msgspec.json.encode(self._spec(ready_read)))
            with open(layout.console, "ab") as console:
                self._unshare = subprocess.Popen(
                    ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--net", "--uts",
                     "--ipc", "--propagation", "private", "--",
                     sys.executable, "-m", "herder.sim.hostinit", str(layout.spec)],
                    stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                    pass_fds=(ready_read,), start_new_session=True, env=node_environment(),
                    cwd="/")
            os.close(ready_read)
            ready_read = -1
            unshare = hoststate.process_record(self._unshare.pid)
            with hoststate.update(self.sim.index) as record:
                record.hosts[self.name].unshare = unshare
            init = hoststate.process_record(self._init_pid(self._unshare, timeout))
            with hoststate.update(self.sim.index) as record:
                record.hosts[self.name].init = init
            try:
                netns.plug(self.sim.index, self.record.slot, init.pid, self.address)
            except HerderError:
                if not hoststate.alive(init):
                    raise HerderError(f"host {self.name} stopped while booting: "
                                      f"{_console_tail(layout)}") from None
                raise
            os.write(ready_write, b"go")
        finally:
            if ready_read >= 0:
                os.close(ready_read)
            os.close(ready_write)  # without "go" first, hostinit gives up: the host ends
        try:
            self._wait_ready(init, timeout)
        except HerderError:
            self.power_off(grace=0)
            raise

    def _init_pid(self, unshare: subprocess.Popen[bytes], timeout: float) -> int:
        """The host's PID 1: unshare's only child."""
        children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                pids = children.read_text().split()
                if pids:
                    return int(pids[0])
            if unshare.poll() is not None:
                break
            time.sleep(0.005)
        raise HerderError(f"host {self.name} did not start: {_console_tail(self.layout)}")

    def _wait_ready(self, init: hoststate.ProcessRecord, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        socket_file = self.layout.source(SUPERVISE_SOCKET)
        last = ""
        while time.monotonic() < deadline:
            if not hoststate.alive(init):
                raise HerderError(f"host {self.name} stopped while booting: "
                                  f"{_console_tail(self.layout)}")
            if socket_file.exists():
                try:
                    self.supervisor("status", timeout=5.0)
                    return
                except HerderError as err:
                    last = str(err)
            time.sleep(0.02)
        raise HerderError(f"host {self.name} did not come up within {timeout:g}s "
                          f"({last or 'no supervisor'}): {_console_tail(self.layout)}")

    def power_off(self, *, grace: float = STOP_GRACE) -> None:
        """Shut the host down: SIGTERM to its supervisor (which stops its daemons), SIGKILL
        after `grace` seconds (at once with 0: a power failure). Its disks stay attached."""
        with hoststate.update(self.sim.index) as wished:  # first: the keeper leaves it off
            wished.hosts[self.name].powered = False
        record = self.record
        if record.kind == "debian":
            _power_off_debian(record, grace)
        else:
            hoststate.end_process(record.init, grace)
        if self._unshare is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._unshare.wait(timeout=10)
            self._unshare = None
        hoststate.end_process(record.unshare, 0)
        with hoststate.update(self.sim.index) as updated:
            updated.hosts[self.name].init = None
            updated.hosts[self.name].unshare = None


class HostSimulation:
    """A set of simulated hosts on one network, with their shared files and published ports."""

    def __init__(self, record: hoststate.SimRecord) -> None:
        self.index = record.index
        self.directory = Path(record.directory)
        self._hosts: dict[str, SimHost] = {}
        self._lock = threading.Lock()
        self._forwarder: subprocess.Popen[bytes] | None = None
        self._keeper: subprocess.Popen[bytes] | None = None

    @classmethod
    def create(cls, directory: Path) -> HostSimulation:
        """A new simulation in `directory` (created): its index, network and shared files."""
        directory.mkdir(parents=True, exist_ok=True)
        prepare_machine()
        record = hoststate.allocate(directory.resolve())
        sim = cls(record)
        try:
            sim.shared_dir.mkdir(parents=True, exist_ok=True)
            sim.shared_images_dir.mkdir(parents=True, exist_ok=True)
            (sim.directory / "nodes").mkdir(exist_ok=True)
            sim.write_hosts()
            netns.create(sim.index)
        except BaseException:
            teardown_record(record)
            raise
        return sim

    @classmethod
    def open(cls, directory: Path) -> HostSimulation:
        """The running simulation in `directory`."""
        record = hoststate.find(directory)
        if record is None:
            raise HerderError(f"no namespaced simulation in {directory}")
        return cls(record)

    @property
    def hosts_file(self) -> Path:
        return self.directory / "hosts"

    @property
    def shared_dir(self) -> Path:
        return self.directory / "shared" / "file-storage"

    @property
    def shared_images_dir(self) -> Path:
        """The sharedimg provider's images (SHARED_IMAGES on every host)."""
        return self.directory / "shared" / "sharedimg"

    @property
    def netns(self) -> str:
        return netns.namespace(self.index)

    @property
    def record(self) -> hoststate.SimRecord:
        record = hoststate.load(self.index)
        if record is None:
            raise HerderError(f"simulation {self.index} is gone")
        return record

    def address(self, host: int) -> str:
        """198.18.<index>.<host>: an address of this simulation's network."""
        return netns.address(self.index, host)

    @property
    def hosts(self) -> dict[str, SimHost]:
        with self._lock:
            for name in self.record.hosts:
                self._hosts.setdefault(name, SimHost(self, name))
            return dict(self._hosts)

    def host(self, name: str) -> SimHost:
        """A host by its name, or by the first label of it when that is unique."""
        hosts = self.hosts
        found = hosts.get(name)
        if found is None:
            matches = [h for n, h in hosts.items() if n.split(".")[0] == name]
            found = matches[0] if len(matches) == 1 else None
        if found is None:
            raise HerderError(f"no simulated host {name} (hosts: {', '.join(sorted(hosts))})")
        return found

    def write_hosts(self, extra: Iterable[tuple[str, Sequence[str]]] | None = None) -> None:
        """The shared /etc/hosts: every host (full and short name), then `extra` (address,
        names; None: those given last, e.g. the clusters' names, kept in `<sim>/hosts.extra`,
        so that hosts added for one cluster never hide another's name meanwhile: `cluster
        init` resolves it). Rewritten in place: each host has it bind-mounted, a new file
        would not show. Under a lock: clusters starting at once into one network."""
        kept = self.directory / "hosts.extra"
        with debroot.locked(self.directory / "hosts.lock"):
            if extra is None:
                with contextlib.suppress(OSError, ValueError, TypeError):
                    extra = [(str(a), [str(n) for n in names])
                             for a, names in json.loads(kept.read_text())]
            else:
                extra = [(a, list(names)) for a, names in extra]
                kept.write_text(json.dumps(extra))
            entries = [(h.address, [h.name, h.name.split(".")[0]])
                       for h in self.record.hosts.values()]
            text = hostfiles.hosts_file([*entries, *(extra or [])])
            with open(self.hosts_file, "a+") as hosts:
                hosts.seek(0)
                hosts.truncate()
                hosts.write(text)

    def add_hosts(self, configs: Sequence[HostConfig],
                  timeout: float = BOOT_TIMEOUT) -> list[SimHost]:
        """Create and boot hosts (in parallel); on failure the new ones are removed again."""
        names = [c.name for c in configs]
        with hoststate.update(self.index) as record:
            taken = [c.name for c in configs if c.name in record.hosts]
            if taken or len(set(names)) != len(names):
                raise HerderError(f"host {(taken or names)[0]} exists already")
            slot = max((h.slot for h in record.hosts.values()), default=0)
            for offset, config in enumerate(configs, start=1):
                self._check_address(config.address, record)
                record.hosts[config.name] = hoststate.HostRecord(
                    name=config.name, address=config.address, slot=slot + offset,
                    directory=str(self.directory / "nodes" / config.name),
                    volume_group=config.volume_group, kind=config.kind)
        hosts = [self.host(name) for name in names]
        self.write_hosts()
        if any(c.kind == "debian" for c in configs):
            try:  # once for all the hosts (they install the same root and wheel)
                debhost.layers(debroot.ensure_root(), debhost.build_wheelhouse(self.directory))
            except BaseException:
                self.remove_hosts(names)
                raise

        def bring_up(pair: tuple[SimHost, HostConfig]) -> None:
            host, config = pair
            host.provision(config)
            host.power_on(timeout)

        try:
            with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
                list(pool.map(bring_up, zip(hosts, configs, strict=True)))
        except BaseException:
            self.remove_hosts(names)
            raise
        return hosts

    def _check_address(self, address: str, record: hoststate.SimRecord) -> None:
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            raise HerderError(f"{address!r} is not an IP address") from None
        if parsed not in netns.subnet(self.index) or address == self.address(
                netns.SIMULATOR_HOST) or parsed == netns.subnet(self.index).broadcast_address:
            raise HerderError(f"{address} is no host address of this simulation's network "
                              f"{netns.subnet(self.index)} (.1 is the simulator's)")
        if any(h.address == address for h in record.hosts.values()):
            raise HerderError(f"{address} belongs to another host already")

    def remove_hosts(self, names: Iterable[str], *, grace: float = 0) -> None:
        """Power hosts off for good; remove their loop devices, directories and records."""
        names = list(names)
        record = self.record
        gone = [record.hosts[n] for n in names if n in record.hosts]
        _power_off_all(gone, grace, self.index)
        directories = [Path(h.directory) for h in gone if Path(h.directory).is_dir()]
        _detach_loops(gone, directories)
        for directory in directories:
            shutil.rmtree(directory)
        with hoststate.update(self.index) as updated:
            for name in names:
                updated.hosts.pop(name, None)
        with self._lock:
            for name in names:
                self._hosts.pop(name, None)
        self.write_hosts()

    # --- published ports --------------------------------------------------------------

    @property
    def forward_socket(self) -> Path:
        return hoststate.runtime_dir(self.index) / "forward.sock"

    def _ensure_forwarder(self) -> None:
        # under the simulation's lock: clusters starting at once into one network (`cluster
        # simulate --network`) would each start a forwarder, one of them recorded nowhere
        with debroot.locked(self.directory / DAEMONS_LOCK):
            self._start_forwarder()

    def _start_forwarder(self) -> None:
        if hoststate.alive(self.record.forwarder) and self.forward_socket.exists():
            return
        hoststate.runtime_dir(self.index).mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.directory / "forward.log", "ab") as out:
            self._forwarder = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{self.netns}", "--",
                 sys.executable, "-m", "herder.sim.forward", str(self.forward_socket)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env=node_environment(), cwd="/")
        process = hoststate.process_record(self._forwarder.pid)
        with hoststate.update(self.index) as record:
            record.forwarder = process
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            if self._forwarder.poll() is not None:
                raise HerderError(f"the port forwarder exited with {self._forwarder.returncode}")
            if self.forward_socket.exists():
                with contextlib.suppress(HerderError):
                    forward.request(self.forward_socket, "list", timeout=5.0)
                    return
            time.sleep(0.02)
        raise HerderError("the port forwarder did not start within 30s")

    def _save_ports(self, reply: forward.Reply) -> dict[str, str]:
        with hoststate.update(self.index) as record:
            record.published = dict(reply.ports)
        return dict(reply.ports)

    def publish(self, listen: str, target: str) -> dict[str, str]:
        """Listen on `listen` (IP:PORT on the machine's loopback) and forward its connections
        to `target` (IP:PORT in the cluster); returns every published port."""
        self._ensure_forwarder()
        return self._save_ports(forward.publish(self.forward_socket, listen, target))

    def retarget(self, listen: str, target: str) -> dict[str, str]:
        """Forward new connections to a published port to `target` from now on."""
        return self._save_ports(forward.request(self.forward_socket, "retarget",
                                                listen=listen, target=target))

    def unpublish(self, listen: str) -> dict[str, str]:
        return self._save_ports(forward.request(self.forward_socket, "unpublish",
                                                listen=listen))

    def published(self) -> dict[str, str]:
        if not hoststate.alive(self.record.forwarder):
            return {}
        return self._save_ports(forward.request(self.forward_socket, "list"))

    # --- hosts that reboot themselves -------------------------------------------------------

    def keep_powered(self) -> None:
        """Start the keeper (`herder.sim.keeper`, once per simulation): a host that ends its
        own PID namespace (noded's power cycle: reboot(2) there) is booted again, as a real
        machine comes back after a reboot."""
        with debroot.locked(self.directory / DAEMONS_LOCK):  # one, as `_ensure_forwarder`
            self._start_keeper()

    def _start_keeper(self) -> None:
        if hoststate.alive(self.record.keeper):
            return
        with open(self.directory / "keeper.log", "ab") as out:
            self._keeper = subprocess.Popen(
                [sys.executable, "-m", "herder.sim.keeper", str(self.directory)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env=node_environment(), cwd="/")
        process = hoststate.process_record(self._keeper.pid)
        with hoststate.update(self.index) as record:
            record.keeper = process

    # --- the end ----------------------------------------------------------------------

    def teardown(self, *, grace: float = STOP_GRACE) -> None:
        """Remove everything: hosts, loop devices, forwarder, network, record."""
        teardown_record(self.record, grace=grace)
        for proc in [self._forwarder, self._keeper,
                     *(h._unshare for h in self._hosts.values())]:
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)


def _power_off_all(hosts: Sequence[hoststate.HostRecord], grace: float,
                   index: int | None = None) -> None:
    if index is not None:  # first: the keeper must not boot them again
        with contextlib.suppress(HerderError), hoststate.update(index) as wished:
            for host in hosts:
                if host.name in wished.hosts:
                    wished.hosts[host.name].powered = False

    def off(host: hoststate.HostRecord) -> None:
        if host.kind == "debian":
            _power_off_debian(host, grace)
            debhost.unmount_overlay(Path(host.directory))
            return
        # A simulator that died between starting `unshare` and recording the host's PID 1
        # leaves only `unshare` in the record: its child is that PID 1.
        for init in [host.init] if host.init is not None else hoststate.children(host.unshare):
            hoststate.end_process(init, grace)
        hoststate.end_process(host.unshare, 0)

    if hosts:
        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            list(pool.map(off, hosts))


def _power_off_debian(host: hoststate.HostRecord, grace: float) -> None:
    """A Debian host's systemd asked to power off (SIGTERM would make it re-execute itself),
    then its PID 1 and systemd-nspawn killed after `grace` seconds."""
    pid = host.init.pid if hoststate.alive(host.init) and host.init else None
    nspawn = host.unshare.pid if hoststate.alive(host.unshare) and host.unshare else None
    debhost.power_off(nspawn, pid, grace)
    for process in (host.init, host.unshare):
        if hoststate.alive(process):
            hoststate.end_process(process, 0)


def _detach_loops(hosts: Sequence[hoststate.HostRecord], directories: Sequence[Path]) -> None:
    files = {identity for h in hosts for identity in h.images}
    for directory in directories:
        files |= loopdev.files_under(directory)
    ours = loopdev.owned(loopdev.list_loops(), files)
    left = loopdev.detach(ours)
    if left:
        raise HerderError(f"loop devices still attached: {', '.join(left)}")


def teardown_record(record: hoststate.SimRecord, *, grace: float = STOP_GRACE) -> None:
    """Remove whatever `record` names, whether its simulator runs or crashed; the record
    goes last (a failure leaves it for another try)."""
    hoststate.end_process(record.keeper, 2.0)  # first: it would boot the hosts again
    hoststate.end_process(record.forwarder, 2.0)
    hosts = list(record.hosts.values())
    _power_off_all(hosts, grace)
    directory = Path(record.directory)
    _detach_loops(hosts, [directory] if directory.is_dir() else [])
    for process in netns.processes(record.index):  # e.g. a forwarder started, not recorded
        hoststate.end_process(process, 0)
    netns.destroy(record.index)
    hoststate.remove(record.index)


def run_on(directory: Path, node: str, argv: Sequence[str], *, input: str | None = None,
           timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    """`herder cluster simulate --exec NODE -- COMMAND...`: run COMMAND on NODE (its full
    name or its first label) of the simulation in `directory`, inside its namespaces as ssh
    would; its exit code and output. (An interactive caller can rather `os.execvpe` the
    host's `nsenter_argv(argv)` with `node_environment()`: the terminal stays attached.)"""
    return HostSimulation.open(directory).host(node).run(argv, input=input, timeout=timeout)


def teardown(directory: Path, *, grace: float = STOP_GRACE) -> bool:
    """Tear down the simulation in `directory`; False when there is none."""
    record = hoststate.find(directory)
    if record is None:
        return False
    teardown_record(record, grace=grace)
    return True


def teardown_abandoned() -> list[int]:
    """Tear down every simulation whose directory is gone (its simulator died and its files
    were removed); returns their indexes."""
    gone = [r for r in hoststate.records() if not Path(r.directory).is_dir()]
    for record in gone:
        teardown_record(record, grace=0)
    return [r.index for r in gone]
