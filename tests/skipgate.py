"""The suite must not go green by skipping (issue 33): every skip's reason is printed at the
end of the run, and with `--allowed-skips FILE` (what `make test` and CI pass) a skip whose
reason matches none of the file's patterns fails the run. The file lists the few reasons a
machine may legitimately lack (the Ganeti peers without ../shared, a kernel module this
machine has), one regular expression per line; lines starting with `#` are comments."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest


def load_patterns(path: Path) -> list[re.Pattern[str]]:
    patterns = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            patterns.append(re.compile(text))
        except re.error as err:
            raise pytest.UsageError(f"{path}:{number}: not a regular expression: {err}") from None
    return patterns


def skip_reason(report: pytest.TestReport) -> str:
    """A skip's reason as `-ra` shows it (without pytest's "Skipped: " prefix)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ")


def unexpected(reasons: list[str], patterns: list[re.Pattern[str]]) -> list[str]:
    """The reasons no pattern allows (`re.search`)."""
    return [r for r in reasons if not any(p.search(r) for p in patterns)]


class SkipGate:
    """Collects the skips of a run (on the xdist controller: the workers' reports arrive
    here) and fails the run on one that is not allowed."""

    def __init__(self, allowed: Path | None) -> None:
        self.allowed = allowed
        self.patterns = load_patterns(allowed) if allowed else []
        self.skips: list[tuple[str, str]] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append((report.nodeid, skip_reason(report)))

    def refused(self) -> list[tuple[str, str]]:
        if self.allowed is None:
            return []
        bad = set(unexpected([r for _, r in self.skips], self.patterns))
        return [(nodeid, reason) for nodeid, reason in self.skips if reason in bad]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.refused() and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.skips:
            return
        counts = Counter(reason for _, reason in self.skips)
        terminalreporter.section("skips by reason")
        for reason, count in counts.most_common():
            terminalreporter.line(f"{count:4d}  {reason}")
        refused = self.refused()
        if refused:
            terminalreporter.section(f"skips not allowed by {self.allowed}", red=True)
            for nodeid, reason in refused:
                terminalreporter.line(f"{nodeid}: {reason}", red=True)
            terminalreporter.line("a test that cannot start what it tests must fail, not skip; "
                                  "add a reason to the file only for what a machine may "
                                  "legitimately lack", red=True)


def addoption(parser: pytest.Parser) -> None:
    parser.addoption("--allowed-skips", metavar="FILE", default=None,
                     help="fail the run on a skip whose reason matches no pattern of FILE")


def configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller sees every report
    allowed = config.getoption("--allowed-skips")
    path = Path(allowed) if allowed else None
    if path is not None and not path.is_absolute():
        path = Path(config.rootpath) / path
    if path is not None and not path.is_file():
        raise pytest.UsageError(f"--allowed-skips: {path} is not a file")
    config.pluginmanager.register(SkipGate(path), "herder-skipgate")
