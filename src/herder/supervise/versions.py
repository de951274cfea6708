"""One node's switch to another installed build (`herder daemon-util switch-version`, a step of
`herder cluster upgrade`; the layout: `herder.core.install_layout`): point `current` at the
other build, then stop and start again herder's daemons that run here (never libvirtd, so the
guests' QEMU processes go on: noded finds its domains again when it starts), which then run
the other build.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from herder.core import supervise_control
from herder.core.errors import HerderError
from herder.core.install_layout import KEEP_LEASE, RUN_DIR, VERSIONS, Layout
from herder.supervise.daemon_util import Backend
from herder.supervise.settings import HERDER_DAEMONS, KNOWN_DAEMONS


def switch_version(version: str, layout: Layout, backend: Backend,
                   say: Callable[[str], None] = lambda line: None,
                   run_dir: Path = RUN_DIR) -> list[str]:
    """Point `current` at `version`, then stop and start again, one after the other in start
    order, herder's daemons that run here (Ganeti's `daemon-util stop-all`, symlink,
    `start-all` on one node); the daemons restarted.

    One at a time rather than all stopped at once: a node's liveness lease is renewed by its
    noded through the master's masterd, else through the master candidates' nodeds, and runs
    out 6 s after the last renewal (docs/ha.md "Node failure"): with every daemon of the
    master down at once, the other nodes would lose their lease and stop their guests. A
    running daemon keeps the build it was started from (its interpreter's own venv), so the
    link can move first."""
    if not layout.installed(version):
        raise HerderError(f"herder {version} is not installed here: no "
                          f"{layout.version_dir(version)}/bin/herder")
    running = [d for d in KNOWN_DAEMONS if d in HERDER_DAEMONS
               and backend.state(d) == supervise_control.RUNNING]
    before = layout.current_version()
    try:
        layout.switch(version)
    except OSError as err:
        raise HerderError(f"cannot switch {layout.current} to {version}: {err}") from None
    say(f"{layout.current} -> {VERSIONS}/{version} (was {before})")
    for daemon in running:
        say(f"restarting {daemon}")
        # masterd on etcd keeps its master lease across the restart (the next one holds it):
        # a clean stop would hand the cluster to another candidate in the middle of the
        # upgrade (herder.masterd.lease). Asked only for this stop: the request goes with it
        keep = daemon == "masterd" and request_lease_kept(run_dir)
        try:
            backend.stop([daemon])
        finally:
            if keep:
                (run_dir / KEEP_LEASE).unlink(missing_ok=True)
        backend.start([daemon])
    return running


def request_lease_kept(run_dir: Path) -> bool:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / KEEP_LEASE).write_text("switch-version\n")
    except OSError:  # then masterd hands over as on any clean stop
        return False
    return True
