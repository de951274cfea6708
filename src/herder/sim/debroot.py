"""The Debian 12 root filesystem of the simulated Debian hosts (`cluster simulate --hosts debian`).

Built once per recipe with debootstrap (bookworm), then the operator's guide's own package step
(`scripts/node-install.sh packages --emulated`, the script docs/install.md shows) run inside it,
and cached outside the checkout at `/var/cache/herder-sim/debian-12-<hash>`, the hash covering
the debootstrap arguments and the script's package step (its "root recipe" part), so a changed
recipe builds a new root and an unchanged one is never rebuilt. Nothing of herder is in it: each
host installs the wheel of the checkout under test when it is made (`herder.sim.debhost`).

Atomic: a root is built in a temporary directory beside its final place and renamed into it
only when every step succeeded, so a half-built root (a build killed, a failed apt) is never
used; the next build removes such leftovers. A lock file (flock) per recipe makes concurrent
builders (two pytest workers, two simulators) build it once: the second waits for the first
and finds the root made.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from herder.core.errors import HerderError

CACHE_DIR = Path(os.environ.get("HERDER_SIM_CACHE", "/var/cache/herder-sim"))
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# minbase plus what a booted systemd host needs (systemd as PID 1, D-Bus for systemctl and
# libvirt's units); everything else comes from the guide's script.
INCLUDE = ("systemd-sysv", "dbus", "ca-certificates", "python3", "procps", "iproute2")
DEBOOTSTRAP_ARGS = ("--variant=minbase", f"--include={','.join(INCLUDE)}", SUITE)
# The install script's step that makes the root (the simulated hosts have no KVM: TCG guests,
# so QEMU from bookworm-backports, as the guide says for emulated hosts).
PACKAGE_STEP = ("packages", "--emulated")
# The root's format: raise when the build below changes in a way the hash does not see.
FORMAT = 1
REQUIRED_TOOLS = ("debootstrap", "systemd-nspawn")

Say = Callable[[str], None]


def install_script() -> Path:
    """The guide's install script, in the checkout the simulator runs from."""
    return Path(__file__).resolve().parents[3] / "scripts" / "node-install.sh"


RECIPE_BEGIN = "# >>> root recipe"
RECIPE_END = "# <<< root recipe"


def recipe_text(script: Path | None = None) -> str:
    """The part of the install script the root is made by (its package step, between the
    script's recipe markers); the other steps run per host and may change freely."""
    text = (script or install_script()).read_text()
    begin, end = text.find(RECIPE_BEGIN), text.find(RECIPE_END)
    if begin < 0 or end < begin:
        raise HerderError(f"{script or install_script()}: no '{RECIPE_BEGIN}' ... "
                          f"'{RECIPE_END}' part")
    return text[begin:end]


def recipe_hash(script: Path | None = None) -> str:
    """What the root is made of: the debootstrap arguments, the mirror, the install script's
    package step and how it is run; 16 hex digits of their SHA-256."""
    digest = hashlib.sha256()
    for part in (str(FORMAT), MIRROR, *DEBOOTSTRAP_ARGS, *PACKAGE_STEP):
        digest.update(part.encode() + b"\0")
    digest.update(recipe_text(script).encode())
    return digest.hexdigest()[:16]


def root_path(cache: Path | None = None, script: Path | None = None) -> Path:
    return (cache or CACHE_DIR) / f"debian-12-{recipe_hash(script)}"


def base_path(cache: Path | None = None) -> Path:
    """The debootstrapped system alone (the first stage, kept: a changed package step starts
    from it instead of debootstrapping again)."""
    digest = hashlib.sha256("\0".join((str(FORMAT), MIRROR, *DEBOOTSTRAP_ARGS)).encode())
    return (cache or CACHE_DIR) / f"debian-12-base-{digest.hexdigest()[:16]}"


def unsupported() -> str | None:
    """Why this machine cannot build or boot the Debian root (None: it can)."""
    if os.geteuid() != 0:
        return "Debian hosts need root"
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        return (f"Debian hosts need {', '.join(missing)} "
                "(apt-get install debootstrap systemd-container)")
    return None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(argv: list[str], what: str, log: Path) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise HerderError(f"building the Debian root: {what} failed "
                          f"(exit {done.returncode}, log {log}):\n" + "\n".join(tail))


def nspawn_run(root: Path, argv: list[str], *, binds: tuple[str, ...] = ()) -> list[str]:
    """`argv` run once in `root` (not booted: no init, the machine's network, resolv.conf
    copied), as the build's steps run."""
    return ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit",
            "--resolv-conf=replace-host",
            "-D", str(root), *(f"--bind-ro={b}" for b in binds), *argv]


def ensure_built(final: Path, build: Callable[[Path], None], *, marker: str = "etc/os-release",
                 say: Say | None = None) -> Path:
    """`final`, made by `build(work)` in a temporary directory beside it and renamed into
    place only when `build` returned (a half-built tree is never seen at `final`), under a lock
    file so that concurrent callers build it once: the others wait and find it made. A tree is
    complete when it holds `marker`. A failed or killed build's leftovers are removed."""
    if (final / marker).exists():
        return final
    with locked(final.with_name(final.name + ".lock")):
        if (final / marker).exists():  # another builder made it meanwhile
            return final
        for stale in final.parent.glob(final.name + ".build-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a build that was killed
        if final.exists():  # not complete (no marker): never used, made again
            shutil.rmtree(final)
        work = final.with_name(f"{final.name}.build-{os.getpid()}")
        started = time.monotonic()
        try:
            build(work)
            work.rename(final)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        if say:
            say(f"{final.name} built in {time.monotonic() - started:.0f} s")
    return final


def ensure_root(cache: Path | None = None, say: Say | None = None) -> Path:
    """The cached root of the current recipe, built first if there is none (debootstrap, then
    the guide's package step in it). Raises HerderError with the failing step's log tail."""
    why = unsupported()
    if why:
        raise HerderError(why)
    script = install_script()
    final = root_path(cache, script)
    base = base_path(cache)
    log = final.with_name(final.name + ".log")

    def debootstrap(work: Path) -> None:
        if say:
            say(f"debootstrap of Debian 12 into {base} (once; log {log})")
        _run(["debootstrap", *DEBOOTSTRAP_ARGS, str(work), MIRROR], "debootstrap", log)

    def build(work: Path) -> None:
        if say:
            say(f"building the Debian 12 root {final} (once; log {log})")
        ensure_built(base, debootstrap, say=say)
        _run(["cp", "-a", "--reflink=auto", str(base), str(work)], "copying the base", log)
        shutil.copy2(script, work / "root" / "node-install.sh")
        _run(nspawn_run(work, ["/bin/bash", "/root/node-install.sh", *PACKAGE_STEP]),
             "node-install.sh " + " ".join(PACKAGE_STEP), log)
        (work / "root" / "node-install.sh").unlink()
        _run(nspawn_run(work, ["apt-get", "clean"]), "apt-get clean", log)
        # Each host is its own machine: an empty machine-id makes systemd create a fresh one
        # at its first boot (a root with one would give every host the same).
        (work / "etc" / "machine-id").write_text("")

    return ensure_built(final, build, say=say)
