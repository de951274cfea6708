"""VM failure notifications: masakari's wire format, shared by instmon (which sends them) and
maintd (which receives them), plus the table of which notified events are failures.

The body is masakari's `POST /notifications` request (masakari API v1.0):

    {"notification": {"type": "VM", "hostname": "node1", "generated_time":
     "2026-11-22T00:14:21.231963", "payload": {"event": "LIFECYCLE", "instance_uuid":
     "96ab1c42-...", "vir_domain_event": "STOPPED_FAILED"}}}

`parse()` validates a body as masakari's JSON schema does (the rules are in
../shared/reference/masakari.md §2.3) and raises `NotificationError` with the reason, which a
receiver answers with 400.

`generated_time` is naive UTC ISO 8601 with microseconds (masakari's format); a notification
is identified by (hostname, generated_time, payload): the same triple twice is the same
notification delivered again (a retry whose first answer was lost).
"""

from __future__ import annotations

import datetime
import re
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from herder.core import purpose_keys, settingsfile

TYPES = ("VM", "COMPUTE_HOST", "PROCESS")
HOSTNAME_RE = re.compile(r"^[a-zA-Z0-9-._]{1,255}$")
PAYLOAD_KEY_RE = re.compile(r"^[a-zA-Z0-9-_:. ]{1,255}$")
VM_KEYS = ("event", "instance_uuid", "vir_domain_event")
TOKEN_HEADER = "X-Auth-Token"  # masakari's (keystone) token header

# Failure kinds maintd acts on; any other notified event is recorded and ignored.
CRASH = "crash"  # the VM died: restart it (same node first)
IO_ERROR = "io-error"  # its storage failed: drain the node, start it elsewhere
STOP = "stop"  # stopped or destroyed: a failure only when admin-up and herder did not order it
KINDS = (CRASH, IO_ERROR, STOP)

# (payload.event, payload.vir_domain_event) -> failure kind. masakari's engine allow-list
# (instance_events.INSTANCE_EVENTS) plus herder's "an admin-up instance stopped without an
# order" (the only crash libvirt's test driver can produce is an external destroy).
DEFAULT_FAILURES: dict[tuple[str, str], str] = {
    ("LIFECYCLE", "STOPPED_FAILED"): CRASH,
    ("QEMU_GUEST_AGENT_ERROR", "STOPPED_FAILED"): CRASH,
    ("IO_ERROR", "IO_ERROR_REPORT"): IO_ERROR,
    ("LIFECYCLE", "STOPPED_DESTROYED"): STOP,
    ("LIFECYCLE", "STOPPED_SHUTDOWN"): STOP,
}


class NotificationError(ValueError):
    """A notification body that masakari's schema would refuse (the message says why)."""


@dataclass(frozen=True)
class Notification:
    type: str
    hostname: str
    generated_time: str
    payload: dict[str, str]

    @property
    def key(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        """Identity: the same key twice is one notification delivered twice."""
        return (self.hostname, self.generated_time, tuple(sorted(self.payload.items())))

    @property
    def instance_uuid(self) -> str:
        return self.payload.get("instance_uuid", "")

    @property
    def event(self) -> str:
        return self.payload.get("event", "")

    @property
    def detail(self) -> str:
        return self.payload.get("vir_domain_event", "")

    def to_body(self) -> dict[str, Any]:
        return {"notification": {"type": self.type, "hostname": self.hostname,
                                 "generated_time": self.generated_time,
                                 "payload": dict(self.payload)}}

    def to_json(self) -> bytes:
        return msgspec.json.encode(self.to_body())


def generated_time(when: datetime.datetime | None = None) -> str:
    """masakari's format: naive UTC, ISO 8601, always with microseconds."""
    when = when or datetime.datetime.now(datetime.UTC)
    if when.tzinfo is not None:
        when = when.astimezone(datetime.UTC).replace(tzinfo=None)
    return when.isoformat(timespec="microseconds")


def vm_notification(hostname: str, instance_uuid: str, event: str, detail: str,
                    when: datetime.datetime | None = None) -> Notification:
    return Notification("VM", hostname, generated_time(when),
                        {"event": event, "instance_uuid": instance_uuid,
                         "vir_domain_event": detail})


def _check_time(value: Any) -> str:
    if not isinstance(value, str):
        raise NotificationError("notification.generated_time must be a date-time string")
    try:
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise NotificationError(f"notification.generated_time {value!r} is not an ISO 8601 "
                                "date-time") from None
    return value


def parse(body: bytes | str | Mapping[str, Any]) -> Notification:
    """A validated notification from a request body (NotificationError when refused)."""
    if isinstance(body, bytes | str):
        try:
            data = msgspec.json.decode(body)
        except msgspec.DecodeError as err:
            raise NotificationError(f"body is not JSON: {err}") from None
    else:
        data = body
    if not isinstance(data, Mapping) or set(data) != {"notification"}:
        raise NotificationError("body must be an object with exactly one key, 'notification'")
    note = data["notification"]
    if not isinstance(note, Mapping):
        raise NotificationError("'notification' must be an object")
    required = ("type", "hostname", "generated_time", "payload")
    missing = [k for k in required if k not in note]
    if missing:
        raise NotificationError(f"notification lacks {', '.join(missing)}")
    extra = sorted(set(note) - set(required))
    if extra:
        raise NotificationError(f"notification has unknown keys: {', '.join(extra)}")
    kind = note["type"]
    if kind not in TYPES:
        raise NotificationError(f"notification.type must be one of {', '.join(TYPES)}")
    hostname = note["hostname"]
    if not isinstance(hostname, str) or not HOSTNAME_RE.match(hostname):
        raise NotificationError("notification.hostname must be 1-255 characters of "
                                "a-z, A-Z, 0-9, '-', '.', '_'")
    when = _check_time(note["generated_time"])
    payload = note["payload"]
    if not isinstance(payload, Mapping):
        raise NotificationError("notification.payload must be an object")
    for key, value in payload.items():
        if not isinstance(key, str) or not PAYLOAD_KEY_RE.match(key):
            raise NotificationError(f"payload key {key!r} is not allowed")
        if not isinstance(value, str) or len(value) > 255:
            raise NotificationError(f"payload.{key} must be a string of at most 255 characters")
    if kind == "VM":
        if set(payload) != set(VM_KEYS):
            raise NotificationError("a VM payload has exactly the keys event, instance_uuid "
                                    "and vir_domain_event")
        for key in ("event", "vir_domain_event"):
            if not payload[key]:
                raise NotificationError(f"payload.{key} must not be empty")
        try:
            uuidlib.UUID(payload["instance_uuid"])
        except ValueError:
            raise NotificationError("payload.instance_uuid is not a UUID") from None
    return Notification(kind, hostname, when, dict(payload))


class FailureTableFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`herder maintd --failure-table FILE`: TOML, both keys optional."""

    replace: bool = False  # true: the file's table replaces DEFAULT_FAILURES
    failures: dict[str, str] = {}  # "EVENT.VIR_DOMAIN_EVENT" -> a kind of KINDS or "ignore"


FAILURE_TABLE = "the failure table"


def load_failure_table(path: str | Path | None) -> dict[tuple[str, str], str]:
    """The failure table: DEFAULT_FAILURES, or a TOML file's `[failures]` section mapping
    "EVENT.VIR_DOMAIN_EVENT" to a kind or "ignore" (`replace = true` drops the defaults).
    Raises HerderError (one line) on a bad file: unknown keys, wrong types, bad entries."""
    if path is None:
        return dict(DEFAULT_FAILURES)
    path = Path(path)
    data = settingsfile.load(path, FailureTableFile, FAILURE_TABLE)
    table = {} if data.replace else dict(DEFAULT_FAILURES)
    for key, kind in data.failures.items():
        event, sep, detail = key.partition(".")
        if not sep or not event or not detail:
            raise settingsfile.problem(path, FAILURE_TABLE, "failures",
                                       f"key {key!r} is not EVENT.VIR_DOMAIN_EVENT")
        if kind == "ignore":
            table.pop((event, detail), None)
        elif kind in KINDS:
            table[(event, detail)] = kind
        else:
            raise settingsfile.problem(path, FAILURE_TABLE, f'failures."{key}"',
                                       f"{kind!r}: the kind must be one of {', '.join(KINDS)} "
                                       "or ignore")
    return table


def failure_kind(note: Notification,
                 table: Mapping[tuple[str, str], str] = DEFAULT_FAILURES) -> str | None:
    """The failure kind of a notification, None when it is not a failure."""
    if note.type != "VM":
        return None
    return table.get((note.event, note.detail))


def token_for(key: bytes) -> str:
    """The token instmon sends and maintd expects: the notification key, derived from the
    cluster HMAC key for this purpose alone (`core.purpose_keys`; every node that has the
    cluster key has the token, with nothing more to distribute, and no signature of another
    protocol is the token)."""
    return purpose_keys.derive(key, purpose_keys.NOTIFICATION).hex()
