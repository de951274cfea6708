"""diagnose: the node's self-diagnose (design-maintd "Self-diagnose data collector").

Category node, kind 1, served at /1/report/node/diagnose. Its `data` is the diagnose
command's JSON object verbatim (design-maintd's protocol, not the `{code, message}` rule of
other status collectors). The command name comes from the cluster config
(`maintenance.diagnoseCommand`), else (a node without a copy) from confd (type 10, that path),
else (a Ganeti cluster's confd has none) from mond's local config file (`diagnose_command`,
`MondSettings.diagnose_command`); only a file in the white-list directory that is a regular
file, owned by root, not writable by group or others, executable and without setuid/setgid
bits may run, with no arguments, empty stdin, a minimal environment
and a timeout. The empty name is the built-in "all is well".

When the command is missing, refused, too slow or prints garbage, `data` is
`{"status": "Ok", "command": "", "details": {"diagnose-error": REASON}}`: a broken script never
triggers a repair, but the reason shows.

The report carries a `signature`: `{"timestamp": T, "hmac": H}` where H is the envelope
module's HMAC-SHA1 (cluster key) with salt `str(T)` over the data serialised by
`herder.core.envelope.dumps` (compact JSON, sorted keys). T is the report's timestamp, so maintd
can refuse forged and replayed reports (design-maintd "Result forging").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from herder.core import envelope, whitelist
from herder.mond.collector import Collector, CollectorError, run_command
from herder.mond.report import Kind

STATUSES = ("Ok", "live-repair", "evacuate", "evacuate-failover")
BUILTIN_OK: dict[str, Any] = {"status": "Ok", "command": "", "details": {}}
_SAFE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}


def fallback(reason: str) -> dict[str, Any]:
    return {"status": "Ok", "command": "", "details": {"diagnose-error": reason}}


def check_command(directory: Path, name: str, what: str = "diagnose command") -> Path:
    """The path of a white-listed command (`herder.core.whitelist`; `what`: how messages name
    it; mond's repair route uses the same rules); CollectorError says why one is refused."""
    try:
        return whitelist.check_command(directory, name, what)
    except whitelist.NotWhitelisted as err:
        raise CollectorError(str(err)) from None


def parse_output(text: str) -> dict[str, Any]:
    """The command's stdout: one JSON object with a known `status`."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise CollectorError(f"diagnose output is not JSON: {err.msg} at char {err.pos}") from None
    if not isinstance(value, dict):
        raise CollectorError("diagnose output must be one JSON object")
    if value.get("status") not in STATUSES:
        raise CollectorError(
            f"diagnose status {value.get('status')!r} is not one of {', '.join(STATUSES)}"
        )
    return value


def signature(key: bytes, data: Any, timestamp: int) -> dict[str, Any]:
    return {"timestamp": timestamp,
            "hmac": envelope.compute_hmac(key, str(timestamp), envelope.dumps(data))}


def verify_signature(key: bytes, report: dict[str, Any]) -> bool:
    """Whether a diagnose report's signature matches its data and timestamp."""
    sig = report.get("signature")
    if not isinstance(sig, dict) or sig.get("timestamp") != report.get("timestamp"):
        return False
    expected = envelope.compute_hmac(key, str(sig["timestamp"]), envelope.dumps(report["data"]))
    return isinstance(sig.get("hmac"), str) and expected == sig["hmac"]


class DiagnoseCollector(Collector):
    name = "diagnose"
    category = "node"
    kind = Kind.STATUS
    adaptive = False  # maintd polls at the configured interval

    def command_name(self) -> str:
        return self.ctx.diagnose_command()

    def collect(self) -> dict[str, Any]:
        name = self.command_name()
        if not name:
            return dict(BUILTIN_OK)
        try:
            path = check_command(self.ctx.settings.diagnose_dir, name)
            out = run_command([str(path)], timeout=self.ctx.settings.diagnose_timeout,
                              env=_SAFE_ENV)
            return parse_output(out)
        except CollectorError as err:
            return fallback(str(err))

    def summary(self, data: Any) -> Any:
        return data  # design-maintd: the object verbatim, verbose or not

    def extra_fields(self, data: Any, timestamp: int) -> dict[str, Any]:
        key = self.ctx.hmac_key()
        if key is None:
            return {"signature": None}
        return {"signature": signature(key, data, timestamp)}


COLLECTORS = [DiagnoseCollector]
