"""Simulated hosts that are Debian 12 machines (`cluster simulate --hosts debian`).

Each host is `systemd-nspawn -b`: systemd as the container's PID 1, booted from an overlay of
the cached Debian root (`herder.sim.debroot`: debootstrap plus the guide's package step), its
changes in the host's own directory (`<host>/upper`), so every host starts from the same root
and keeps its own state across reboots (the BMC's power cycle, the keeper's reboot).

Every host is installed as the operator's guide says, by the guide's own script
(`scripts/node-install.sh`): `herder WHEEL` (the wheel of the checkout under test, built
outside the checkout; pip installs it into /opt/herder from a wheelhouse of it and its pinned
dependencies made on the machine, since the hosts have no network but the simulator's) and
`units contrib/systemd` (herder's units enabled). Those steps give the same files on every host,
so they run once per root, wheel and script into a cached overlay layer (`installed_layer`)
that every host mounts under its own changes: a 3-node cluster's start went from ~76 s to
~39 s (pip took ~30 s per host per start, the wheel's build 6-8 s). The only files the
simulator writes into a host are the test bed's stand-ins listed in docs/compat.md N5a. After
the node joined, the simulator runs the script's `libvirt-tls` step there.

The network is the namespace hosts' one (`herder.sim.netns.plug`: the host's eth0 on the
simulator's bridge, its address on its own br0), connected while systemd boots. Its /etc/hosts
is the simulation's shared one (bind-mounted, as for namespace hosts).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from herder.core.errors import HerderError
from herder.sim import debroot

# Until systemd in a host says it finished booting ("running", or "degraded" when a unit
# failed): a loaded 2-core machine boots three at once in well under a minute.
BOOT_TIMEOUT = 120.0
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONTRIB_UNITS = Path(__file__).resolve().parents[3] / "contrib" / "systemd"
OOB_PROGRAM = Path("/opt/herder/bin/herder-oob-ipmi")  # the wheel's, as the guide installs it
# The simulated guests' kernel and initramfs (herder.sim.guest), read-only on every host as
# an operator would copy them there (the cluster's kvm kernel_path/initrd_path name them)
GUEST_IMAGES = Path("/var/cache/herder/guest")
NODE_SCRIPT = "/root/node-install.sh"
CHECKOUT = Path(__file__).resolve().parents[3]  # the source tree the hosts' wheel is built from
WHEELS_INSIDE = "/run/herder-sim-wheels"  # where a host sees the wheelhouse while installing
UNITS_INSIDE = "/run/herder-sim-units"
SCRIPT_INSIDE = "/run/herder-sim-node-install.sh"
# The test bed's one difference from a stock host (docs/compat.md N5a): the
# machine has cgroup v1 and no systemd of its own, a container's cgroup controllers are
# read-only, so libvirt must not put its guests into cgroups of their own.
QEMU_CONF_STANDIN = ("\n# herder test bed (docs/compat.md N5a): this machine's "
                     "cgroup v1\n# controllers are read-only in the container\n"
                     "cgroup_controllers = [ ]\n")
# A stand-in for what a real host's devtmpfs and udev give (docs/compat.md N5a): the machine's
# /dev/loop-control is bound into each host, whose /dev is systemd-nspawn's own tmpfs, so the
# loop devices the kernel makes there (losetup, the sharedimg provider, `ext` and `blockdev`
# disks) need their nodes made in the host at boot. 1024: more than this machine has in use.
LOOP_NODES = 1024
LOOP_UNIT = "herder-sim-loop-nodes.service"
LOOP_UNIT_TEXT = f"""[Unit]
Description=herder test bed: the loop devices' nodes (docs/compat.md N5a)
DefaultDependencies=no
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/python3 -c "import grp, os, stat; disk = grp.getgrnam('disk').gr_gid; \\
 [(os.mknod(p, 0o660 | stat.S_IFBLK, os.makedev(7, i)), os.chown(p, 0, disk)) \\
 for i, p in ((i, '/dev/loop' + str(i)) for i in range({LOOP_NODES})) if not os.path.exists(p)]"

[Install]
WantedBy=sysinit.target
"""


def build_wheelhouse(directory: Path) -> Path:
    """`directory/wheels`: herder's wheel built from the checkout, with its pinned
    dependencies' wheels. Those are made once per set of requirements and kept beside the
    root (`/var/cache/herder-sim/wheels-<hash>`: libvirt-python is built from source, and
    resolving them takes pip half a minute); herder's own wheel once per state of the
    checkout's sources (`herder-wheel-<source_key>`: building it took 6-8 s of every start).
    Under a lock of the simulation: two clusters booting into one network at once would
    each make (and remove) `wheel-build`."""
    with debroot.locked(directory / "wheels.lock"):
        return _build_wheelhouse(directory)


def _build_wheelhouse(directory: Path) -> Path:
    wheels = directory / "wheels"
    if any(wheels.glob("herder-*.whl")):
        return wheels
    build = directory / "wheel-build"
    shutil.rmtree(build, ignore_errors=True)
    partial = build / "wheels"
    partial.mkdir(parents=True)
    built = debroot.ensure_built(debroot.CACHE_DIR / f"herder-wheel-{source_key()}",
                                 _herder_wheel, marker=COMPLETE)
    _touch(built)
    (cached,) = built.glob("herder-*.whl")
    shutil.copy2(cached, partial / cached.name)
    wheel = partial / cached.name
    requires = _requirements(wheel)
    digest = hashlib.sha256("\n".join([sys.version.split()[0], *requires]).encode())
    dependencies = debroot.ensure_built(
        debroot.CACHE_DIR / f"wheels-{digest.hexdigest()[:16]}",
        lambda work: _dependency_wheels(wheel, work), marker=COMPLETE)
    for dependency in dependencies.glob("*.whl"):
        if not dependency.name.startswith("herder-"):
            shutil.copy2(dependency, partial / dependency.name)
    partial.rename(wheels)
    shutil.rmtree(build, ignore_errors=True)
    return wheels


def _herder_wheel(work: Path) -> None:
    # scripts/wheel.sh: the guide's build, from a copy of the checkout (nothing written into
    # it), with the version the checkout's git gives (setuptools-scm)
    _checked(["bash", str(CHECKOUT / "scripts" / "wheel.sh"), str(work), sys.executable],
             "building herder's wheel")
    (work / COMPLETE).write_text("")


# What scripts/wheel.sh puts into the wheel (its `git ls-files` arguments)
WHEEL_SOURCES = ("pyproject.toml", "README.md", "src")


def source_key() -> str:
    """16 hex digits naming the wheel the checkout builds now: the contents of the files
    scripts/wheel.sh copies, what its version comes from (git's `describe` of HEAD, or
    SETUPTOOLS_SCM_PRETEND_VERSION) and this Python. Without git (an unpacked tree) the
    files under WHEEL_SOURCES as they are."""
    digest = hashlib.sha256()
    for part in (sys.version.split()[0], os.environ.get("SETUPTOOLS_SCM_PRETEND_VERSION", "")):
        digest.update(part.encode() + b"\0")
    listed = subprocess.run(
        ["git", "-C", str(CHECKOUT), "ls-files", "-z", "--cached", "--others",
         "--exclude-standard", "--", *WHEEL_SOURCES], capture_output=True, timeout=60)
    described = subprocess.run(
        ["git", "-C", str(CHECKOUT), "describe", "--tags", "--long", "--always", "--dirty"],
        capture_output=True, timeout=60)
    if listed.returncode == 0:
        names = sorted(n.decode() for n in listed.stdout.split(b"\0") if n)
        digest.update(described.stdout + b"\0")
    else:
        names = sorted(str(p.relative_to(CHECKOUT)) for top in WHEEL_SOURCES
                       for p in ([CHECKOUT / top] if (CHECKOUT / top).is_file()
                                 else (CHECKOUT / top).rglob("*"))
                       if p.is_file() and "__pycache__" not in p.parts)
    for name in names:
        path = CHECKOUT / name
        if path.is_file():  # a deleted file git still lists is not copied by wheel.sh either
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


COMPLETE = "complete"  # the marker of a finished dependency wheelhouse


def _requirements(wheel: Path) -> list[str]:
    """The wheel's own Requires-Dist lines (its METADATA): what pip installs with it."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    return sorted(line for line in text.splitlines() if line.startswith("Requires-Dist:"))


def _dependency_wheels(wheel: Path, work: Path) -> None:
    _checked([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(work), str(wheel)],
             "making the wheels of herder's dependencies")
    (work / wheel.name).unlink(missing_ok=True)
    (work / COMPLETE).write_text("")


def _checked(argv: Sequence[str], what: str, timeout: float = 900) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise HerderError(f"{what} failed ({done.returncode}): "
                          f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def mount_overlay(lower: Path | Sequence[Path], directory: Path) -> Path:
    """`directory/root`: the cached root (and layers on it: `lower`, the topmost first) with
    the host's changes on top (mounted once)."""
    merged, upper, work = directory / "root", directory / "upper", directory / "work"
    for path in (merged, upper, work):
        path.mkdir(parents=True, exist_ok=True)
    lowers = [lower] if isinstance(lower, Path) else list(lower)
    if not os.path.ismount(merged):
        _checked(["mount", "-t", "overlay", "overlay", "-o",
                  f"lowerdir={':'.join(map(str, lowers))},upperdir={upper},workdir={work}",
                  str(merged)], f"mounting the root of {directory.name}")
    return merged


def unmount_overlay(directory: Path, *, lazy: bool = True) -> None:
    merged = directory / "root"
    if os.path.ismount(merged):
        subprocess.run(["umount", *(["-l"] if lazy else []), str(merged)],
                       capture_output=True, timeout=60)


# The installed layer's format: raise when what `_install_layer` does changes in a way the
# key does not see.
LAYER_FORMAT = 2  # 2: the loop devices' unit
# Unused installed layers (and cached wheels of herder) are removed after this long: each change
# of the checkout makes new ones (~100 MB a layer), and a layer a running host has as its lower
# directory is touched at every use.
STALE_AFTER = 24 * 3600.0


# Packages a node has only in some clusters, which the test bed's hosts get although the
# guide's package step leaves them out: Open vSwitch (a node with openvswitch NICs; the tests
# start its daemons themselves, in userspace, as herder.sim.ovs does on namespace hosts, so
# Debian's units for it are masked). In a layer of their own on the root, keyed by this list,
# not by the checkout: built once (~1 min, apt from deb.debian.org).
EXTRA_PACKAGES = ("openvswitch-switch",)
EXTRA_MASKED = ("openvswitch-switch.service", "ovsdb-server.service", "ovs-vswitchd.service")
EXTRAS_FORMAT = 1


def extras_layer(root: Path, *, say: debroot.Say | None = None) -> Path:
    """The root's layer of EXTRA_PACKAGES (`/var/cache/herder-sim/extras-<key>/upper`)."""
    digest = hashlib.sha256()
    for part in (str(EXTRAS_FORMAT), root.name, *EXTRA_PACKAGES, *EXTRA_MASKED):
        digest.update(part.encode() + b"\0")
    final = debroot.CACHE_DIR / f"extras-{digest.hexdigest()[:16]}"
    script = (f"apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
              f"--no-install-recommends {' '.join(EXTRA_PACKAGES)} >/dev/null && "
              f"apt-get clean && systemctl mask {' '.join(EXTRA_MASKED)}")

    def build(work: Path) -> None:
        def steps(merged: Path) -> None:
            _checked(debroot.nspawn_run(merged, ["/bin/sh", "-c", script]),
                     f"installing {', '.join(EXTRA_PACKAGES)}")
            # as in the root: each host makes its own machine-id
            (merged / "etc" / "machine-id").write_text("")

        _layer(root, work, steps)

    built = debroot.ensure_built(final, build, marker=COMPLETE, say=say)
    _touch(built)
    return built / "upper"


def _layer(lower: Path | Sequence[Path], work: Path, steps: Callable[[Path], None]) -> None:
    """`work/upper`: what `steps(merged)` changed on an overlay of `lower`, kept as a layer."""
    merged = mount_overlay(lower, work)
    try:
        steps(merged)
    finally:
        unmount_overlay(work, lazy=False)
    if os.path.ismount(work / "root"):
        raise HerderError(f"cannot unmount {work / 'root'}: the layer would be incomplete")
    # the overlay's work directory is of no use as a lower layer
    shutil.rmtree(work / "work", ignore_errors=True)
    (work / "root").rmdir()
    (work / COMPLETE).write_text("")


def layers(root: Path, wheels: Path, *, say: debroot.Say | None = None) -> list[Path]:
    """What a host's overlay has under its own changes, the topmost first: herder installed,
    the extra packages, the cached root."""
    extras = extras_layer(root, say=say)
    return [installed_layer([extras, root], wheels, say=say), extras, root]


def installed_layer(lowers: Sequence[Path], wheels: Path, *,
                    say: debroot.Say | None = None) -> Path:
    """The guide's steps taken once per root, wheel and script rather than on every host at
    every start (pip installing herder took ~30 s per host): herder from the wheel into
    /opt/herder and its units enabled (`scripts/node-install.sh herder WHEEL` and `units`), the
    script kept in /root as the operator copied it, and the test bed's qemu.conf stand-in,
    run on an overlay of the cached root whose upper directory is kept as a layer
    (`/var/cache/herder-sim/installed-<key>/upper`). Each host mounts it between its own
    changes and the root: what the host sees is what the script made there. Built atomically
    and once under a lock (debroot.ensure_built); unused layers are pruned."""
    (wheel,) = wheels.glob("herder-*.whl")
    script = debroot.install_script()
    digest = hashlib.sha256()
    # a layer's own name is its parent's (`<name>/upper`), the root's its own
    names = [p.parent.name if p.name == "upper" else p.name for p in lowers]
    for part in (str(LAYER_FORMAT), *names, QEMU_CONF_STANDIN, LOOP_UNIT_TEXT, NODE_SCRIPT,
                 *sorted(w.name for w in wheels.glob("*.whl"))):
        digest.update(part.encode() + b"\0")
    for path in (wheel, script, *sorted(CONTRIB_UNITS.iterdir())):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    final = debroot.CACHE_DIR / f"installed-{digest.hexdigest()[:16]}"
    built = debroot.ensure_built(final, lambda work: _install_layer(lowers, wheels, work),
                                 marker=COMPLETE, say=say)
    _touch(built)
    if built is final and say:
        say(f"{final.name}: herder installed from {wheel.name}, units enabled")
    _prune(("installed-", "herder-wheel-", "extras-"), keep=built)
    return built / "upper"


def _install_layer(lowers: Sequence[Path], wheels: Path, work: Path) -> None:
    (wheel,) = wheels.glob("herder-*.whl")
    script = debroot.install_script()

    def steps(merged: Path) -> None:
        binds = (f"{wheels}:{WHEELS_INSIDE}", f"{CONTRIB_UNITS}:{UNITS_INSIDE}",
                 f"{script}:{SCRIPT_INSIDE}")
        # pip finds the dependencies in the wheelhouse only (the hosts reach no package index)
        env = ["--setenv=PIP_NO_INDEX=1", f"--setenv=PIP_FIND_LINKS={WHEELS_INSIDE}",
               "--setenv=PIP_DISABLE_PIP_VERSION_CHECK=1"]
        for step in (["herder", f"{WHEELS_INSIDE}/{wheel.name}"], ["units", UNITS_INSIDE]):
            _checked([*debroot.nspawn_run(merged, [], binds=binds), *env, "/bin/bash",
                      SCRIPT_INSIDE, *step], f"node-install.sh {step[0]}")
        # the script stays where the operator copied it (its libvirt-tls step runs after
        # the join)
        shutil.copy2(script, merged / NODE_SCRIPT.lstrip("/"))
        qemu_conf = merged / "etc" / "libvirt" / "qemu.conf"
        if QEMU_CONF_STANDIN not in qemu_conf.read_text():
            with open(qemu_conf, "a") as conf:
                conf.write(QEMU_CONF_STANDIN)
        units = merged / "etc" / "systemd" / "system"
        (units / LOOP_UNIT).write_text(LOOP_UNIT_TEXT)
        (units / "sysinit.target.wants").mkdir(exist_ok=True)
        (units / "sysinit.target.wants" / LOOP_UNIT).symlink_to(f"../{LOOP_UNIT}")

    _layer(lowers, work, steps)


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def _prune(prefixes: Sequence[str], keep: Path) -> None:
    """Cached layers and wheels nobody used for STALE_AFTER seconds, removed (under their
    build lock: never one being made)."""
    now = time.time()
    for path in debroot.CACHE_DIR.iterdir():
        if (path == keep or not path.name.startswith(tuple(prefixes)) or not path.is_dir()
                or path.name.endswith(".lock") or ".build-" in path.name):
            continue
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > STALE_AFTER:
                with debroot.locked(path.with_name(path.name + ".lock")):
                    shutil.rmtree(path, ignore_errors=True)
                path.with_name(path.name + ".lock").unlink(missing_ok=True)


# Where the host's file storage (an ext4 image of its own on a loop device the simulator
# attached, as for namespace hosts) is mounted before systemd-nspawn binds it onto
# /srv/herder/file-storage: `<host>/file-storage`, in a mount namespace of the host's boot only
# (`boot_argv`). Mounted in the machine's, every namespace made meanwhile (other simulations'
# hosts, a Ganeti peer's daemons) would keep a copy and its loop device busy after the host is
# gone. A directory of the overlay instead would make "the file storage is full" mean "the
# machine's disk is full" (docs/compat.md N5a).
FILE_STORAGE_MOUNT = "file-storage"
FILE_STORAGE = "/srv/herder/file-storage"  # herder.sim.host's (which imports this module)


def name_host(root: Path, name: str) -> None:
    """The one file of the guide's install that differs between hosts: its name."""
    (root / "etc" / "hostname").write_text(name + "\n")


# systemd-nspawn's machine names: a valid host name of at most 64 characters
MACHINE_NAME_MAX = 64


def machine_name(name: str, index: int, slot: int) -> str:
    """The container's machine name: the host's first label with the simulation's index and
    the host's slot, unique on the machine. nspawn keys machine-wide state by it
    (/run/systemd/nspawn/propagate/<machine>, made at start and removed at exit): node1 of
    two clusters in one network (`--network`), or of two simulations at once, must not share
    it. (The host's own name is its /etc/hostname, `name_host`.)"""
    suffix = f"-s{index}-{slot}"
    return name.split(".")[0][:MACHINE_NAME_MAX - len(suffix)] + suffix


def boot_argv(root: Path, name: str, hosts_file: Path, *,
              binds: Sequence[str] = (), binds_ro: Sequence[str] = (),
              machine: str | None = None,
              file_storage: tuple[str, Path] | None = None) -> list[str]:
    """systemd-nspawn booting the host: its own network namespace (connected by the
    simulator), not registered with a machined (the machine runs no systemd: --keep-unit,
    no scope of its own), the simulation's /etc/hosts (its DNS) and shared directories
    (`binds`: "SOURCE:TARGET") bound in. `machine`: nspawn's machine name (`machine_name`;
    default the host's first label). `file_storage`: (loop device, mount point) of the
    host's file storage, mounted in a private mount namespace that systemd-nspawn then runs
    in (it ends with the host: the loop device is free again) and bound onto FILE_STORAGE."""
    nspawn = _nspawn_argv(root, name, hosts_file, binds=[
        *binds, *([f"{file_storage[1]}:{FILE_STORAGE}"] if file_storage else [])],
        binds_ro=binds_ro, machine=machine)
    if file_storage is None:
        return nspawn
    device, mount_point = file_storage
    # noinit_itable: no kernel thread zeroing the inode tables into the sparse image
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            'mount -t ext4 -o noinit_itable "$1" "$2" && shift 2 && exec "$@"', "boot",
            device, str(mount_point), *nspawn]


def _nspawn_argv(root: Path, name: str, hosts_file: Path, *, binds: Sequence[str],
                 binds_ro: Sequence[str], machine: str | None = None) -> list[str]:
    return ["systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit",
            "--private-network", f"--machine={machine or name.split('.')[0]}", "-D", str(root),
            f"--bind-ro={hosts_file}:/etc/hosts", *(f"--bind={b}" for b in binds),
            *(f"--bind-ro={b}" for b in binds_ro),
            "--bind=/dev/loop-control",  # the loop devices' stand-in (LOOP_UNIT)
            "--capability=all", "--console=read-only"]


def leader(nspawn_pid: int, timeout: float = 30.0) -> int:
    """The container's PID 1 (systemd), as the machine sees it: the child of systemd-nspawn
    that is PID 1 of its own PID namespace."""
    children = Path(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            for pid in children.read_text().split():
                status = Path(f"/proc/{pid}/status").read_text()
                nspid = next((line.split()[1:] for line in status.splitlines()
                              if line.startswith("NSpid:")), [])
                if len(nspid) >= 2 and nspid[-1] == "1":
                    return int(pid)
        if not Path(f"/proc/{nspawn_pid}").exists():
            break
        time.sleep(0.05)
    raise HerderError("the container's systemd did not start")


def nsenter_argv(pid: int, argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """`argv` inside the container as root logged in there would run it (its namespaces and
    root; a plain environment). `--root` and `--wd` without a value: the container's systemd's
    (with a value nsenter opens that path in the machine's namespace, before entering: a
    working directory outside the container, where getcwd() fails)."""
    environment = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root", **(env or {})}
    return ["nsenter", f"--target={pid}", "--mount", "--uts", "--ipc", "--net", "--pid",
            "--root", "--wd", "--", "/usr/bin/env", "-i",
            *(f"{k}={v}" for k, v in environment.items()), *argv]


def wait_booted(pid: int, timeout: float = BOOT_TIMEOUT) -> str:
    """Until systemd in the container has finished booting: its state (running, degraded)."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            raise HerderError("the container stopped while booting")
        done = subprocess.run(nsenter_argv(pid, ["systemctl", "is-system-running"]),
                              capture_output=True, text=True, timeout=30)
        state = done.stdout.strip()
        if state in ("running", "degraded"):
            return state
        time.sleep(0.5)
    raise HerderError(f"the container did not finish booting within {timeout:g} s ({state})")


def power_off(nspawn_pid: int | None, pid: int | None, grace: float) -> None:
    """A clean shutdown (SIGRTMIN+4 to systemd: poweroff) for `grace` seconds, then SIGKILL to
    the container's PID 1 (the kernel ends its PID namespace with it: a power failure)."""
    if pid is not None and grace > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGRTMIN + 4)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.1)
    for target in (pid, nspawn_pid):
        if target is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)
