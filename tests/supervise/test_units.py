"""herder's systemd units (contrib/systemd) against what drives them and what installs herder:
the names `herder daemon-util` uses, every daemon in herder.target, the documented install
prefix, the no-restart-loop rule for "not my role" (exit 11), and `systemd-analyze verify`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from herder.core import serve, supervise_control
from herder.masterd.daemon import EXIT_LEASE_LOST, EXIT_NOTMASTER
from herder.supervise import daemon_util
from herder.supervise.settings import HERDER_DAEMONS, MASTER_DAEMONS

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "contrib" / "systemd"
PREFIX = "/opt/herder"  # docs/install.md: the venv every unit's ExecStart runs herder from
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
CONFD_PATH = "herder-confd.path"


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections: key -> every value given (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path.name}: {raw!r}"
        current.setdefault(key, []).append(value)
    return sections


def words(values: list[str]) -> list[str]:
    return [word for value in values for word in value.split()]


def test_one_unit_per_daemon_with_daemon_utils_names() -> None:
    expected = {daemon_util.unit(name) for name in HERDER_DAEMONS} | {daemon_util.TARGET,
                                                                      CONFD_PATH}
    assert {path.name for path in UNITS.iterdir()} == expected
    assert daemon_util.unit("libvirtd") == "libvirtd.service"  # Debian's, not herder's


def test_the_target_pulls_in_every_daemon() -> None:
    target = parse_unit(UNITS / daemon_util.TARGET)
    assert sorted(words(target["Unit"]["Wants"])) == sorted(
        [*(daemon_util.unit(name) for name in HERDER_DAEMONS), CONFD_PATH])
    assert target["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.parametrize("daemon", HERDER_DAEMONS)
def test_each_service(daemon: str) -> None:
    unit = parse_unit(UNITS / daemon_util.unit(daemon))
    service = unit["Service"]
    assert service["ExecStart"] == [f"{PREFIX}/bin/herder {daemon}"]  # the daemon's defaults
    assert service["Restart"] == ["on-failure"]
    assert service["EnvironmentFile"] == ["-/etc/herder/environment"]
    assert unit["Unit"]["PartOf"] == [daemon_util.TARGET]
    assert unit["Install"]["WantedBy"] == [daemon_util.TARGET]
    # at most 2 starts per StartLimitIntervalSec (10 s) of a daemon failing at once, below
    # StartLimitBurst (5): retried forever
    assert float(service["RestartSec"][0]) >= 5
    # every connection is an open file: the default 1,024 was stopped by about 1,000
    # connections (issue 35 item 8); core.serve raises its soft limit to the same
    assert service["LimitNOFILE"] == [str(serve.OPEN_FILES)]
    master_only = daemon in MASTER_DAEMONS
    # "not my role" is a clean stop, never restarted; every other failure restarts
    assert service.get("SuccessExitStatus") == (["11"] if master_only else None)
    assert service.get("RestartPreventExitStatus") == (["11"] if master_only else None)
    if daemon == "confd":  # master candidates (and the master) hold the config
        assert unit["Unit"]["ConditionPathExists"] == ["/var/lib/herder/config.json"]
    else:
        assert "ConditionPathExists" not in unit["Unit"]


def test_a_promotion_starts_confd_once_the_config_is_there() -> None:
    """A node promoted to master candidate gets config.json from the master after boot, when
    herder-confd.service was already skipped: herder-confd.path starts it then."""
    path = parse_unit(UNITS / CONFD_PATH)
    service = parse_unit(UNITS / daemon_util.unit("confd"))
    assert path["Path"]["PathExists"] == service["Unit"]["ConditionPathExists"]
    assert path["Path"]["Unit"] == [daemon_util.unit("confd")]
    assert path["Install"]["WantedBy"] == [daemon_util.TARGET]


def test_exit_codes_agree_with_the_supervisor() -> None:
    assert EXIT_NOTMASTER == supervise_control.EXIT_NOT_MY_ROLE == 11
    # an etcd master that lost its lease is restarted (a standby again): not "not my role"
    assert EXIT_LEASE_LOST not in (0, supervise_control.EXIT_NOT_MY_ROLE)


def test_the_install_doc_names_the_prefix() -> None:
    text = (REPO / "docs" / "install.md").read_text()
    assert f"python3 -m venv {PREFIX}" in text and f"{PREFIX}/bin/herder" in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None or not SYSTEM_UNITS.is_dir(),
                    reason="systemd-analyze (Debian's systemd) is not installed")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """Every unit as installed: under a root holding the machine's own units, herder's in
    /etc/systemd/system, and an executable at the documented prefix (tests/system/
    test_install.py shows the wheel puts herder there)."""
    shutil.copytree(SYSTEM_UNITS, tmp_path / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    installed = tmp_path / "etc" / "systemd" / "system"
    shutil.copytree(UNITS, installed)
    herder = tmp_path / PREFIX.lstrip("/") / "bin" / "herder"
    herder.parent.mkdir(parents=True)
    herder.write_text("#!/bin/sh\n")
    herder.chmod(0o755)
    names = sorted(path.name for path in UNITS.iterdir())
    done = subprocess.run(["systemd-analyze", "verify", f"--root={tmp_path}", "--man=no",
                           "--generators=no", *names], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    # and it does check: a unit whose command is missing fails
    herder.unlink()
    missing = subprocess.run(["systemd-analyze", "verify", f"--root={tmp_path}", "--man=no",
                              "--generators=no", "herder-noded.service"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and f"{PREFIX}/bin/herder" in missing.stderr
