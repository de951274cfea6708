"""`herder instmon` refuses bad input in one line, before it starts anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def instmon(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERDER_CONFIG": str(tmp_path / "no-cluster.json")}
    return subprocess.run([sys.executable, "-m", "herder.cli.main", "instmon", *args],
                          capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize(("config", "message"), [
    ('colour = "blue"\n[notify]\nurl = "http://127.0.0.1:9/"\n', "unknown key 'colour' (known: "),
    ('[notify]\nurl = "http://127.0.0.1:9/"\nretries = 3\n',
     "unknown key 'retries' in [notify] (known: url, "),
    ('[spool]\ncap = 3\n', "unknown key 'cap' in [spool]"),
    ('[filter]\npreset = "nova"\n', "unknown filter preset"),
    ('[filter]\ncolour = "red"\n', "unknown key 'colour' in [filter]"),
    ('[filter.rules]\n"LIFECYCLE.STOPPED.NOPE" = "notify"\n', "unknown lifecycle event"),
    ('[filter.rules]\n"REBOOT" = true\n', "filter.rules[...]: expected `str`, got `bool`"),
    ('hostname = \n', "not valid TOML"),
    ('hostname = 7\n', "hostname: expected `str`, got `int`"),
    ('[notify]\nurl = "https://x:1817/"\nca_file = "/nonexistent.pem"\n',
     "CA file /nonexistent.pem does not exist"),
    ('[notify]\nurl = "http://127.0.0.1:9/"\ncheck_hostname = "yes"\n',
     "notify.check_hostname: expected `bool`, got `str`"),
    ('[notify]\nurl = "http://127.0.0.1:9/"\nbackoff_max = 0\n',
     "notify.backoff_max: expected `float` > 0.0"),
    ('[spool]\nmax_entries = "many"\n', "spool.max_entries: expected `int`, got `str`"),
    ('[collapse]\ndelay = -1\n', "collapse.delay: expected `float` >= 0.0"),
    ('notify = "http://127.0.0.1:9/"\n', "notify: expected `table`, got `str`"),
])
def test_a_bad_config_is_one_line_and_nothing_starts(tmp_path: Path, config: str,
                                                     message: str) -> None:
    path = tmp_path / "instmon.toml"
    path.write_text(config + '\n[notify]\nurl = "http://127.0.0.1:9/"\n'
                    if "notify" not in config else config)
    run = tmp_path / "run"
    done = instmon(tmp_path, "--config", str(path), "--run-dir", str(run), "--spool-dir",
                   str(tmp_path / "spool"))
    assert done.returncode == 1, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (run / "instmon.pid").exists() and not (tmp_path / "spool").exists()


def test_no_notification_url_without_a_cluster_is_one_line(tmp_path: Path) -> None:
    done = instmon(tmp_path, "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1
    assert "no notification URL: give --notify-url or [notify] url" in done.stderr


@pytest.mark.parametrize("args", [["status"], ["inject", "IO_ERROR.REPORT", "vm1"]])
def test_asking_an_instmon_that_does_not_run_is_one_line(tmp_path: Path,
                                                         args: list[str]) -> None:
    done = instmon(tmp_path, *args, "--run-dir", str(tmp_path))
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"no instmon answers at {tmp_path}/instmon.sock" in done.stderr


def test_the_default_config_file_is_read_when_it_exists(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # the systemd unit runs `herder instmon` without flags: /etc/herder/instmon.toml must count
    from herder.instmon import config

    default = tmp_path / "instmon.toml"
    monkeypatch.setattr(config, "DEFAULT_PATH", default)
    assert config.chosen(None) is None
    default.write_text('hostname = "node9.example.com"\n')
    assert config.chosen(None) == default
    assert config.load(config.chosen(None)).hostname == "node9.example.com"
    given = tmp_path / "other.toml"
    assert config.chosen(given) == given
