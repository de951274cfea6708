"""The one RAPI client: drives herder's masterd or a real Ganeti cluster alike.

It speaks Ganeti's remote API version 2 (paths, query parameters, JSON bodies and job semantics as
Ganeti 3.0's own `ganeti.rapi.client`, verified against a live Ganeti 3.0.2 cluster), plus
herder's documented extensions under `/2/herder/...`. Method names are Ganeti's in snake_case
(`GetNodes` -> `get_nodes`). Every failure — an HTTP error, an unreachable server, a TLS
certificate that does not verify, a job that failed when asked to raise — is a `RapiError`.

Wire facts worth knowing (Ganeti 3.0.2):
- Write operations answer a job id (a JSON number); `wait_for_job` follows it to its end.
- Error bodies are `{"code": 404, "message": "Not Found", "explain": "..."}` with the message
  HTML-escaped (`Can&#x27;t`); herder's may be `{"error": ..., "message": ...}`.
- `GET /2/jobs/<id>/wait` takes a JSON body even though it is a GET, blocks up to 10 s on the
  server and answers `null` when nothing changed, else `{"job_info": [...], "log_entries": [...]}`.
- Job timestamps are `[seconds, microseconds]` pairs; reason-trail timestamps are nanoseconds.
- `GET /2/jobs/<unknown id>` answers 200 with every field null; `get_job_status` turns that into
  a 404 `RapiError`. `DELETE /2/jobs/<id>` of a finished job answers 200 `[false, "..."]`.

The request building and answer parsing are module functions; the HTTP transport is kept
connections over the standard library (`core.http_pool`: a CLI command starts ~0.1 s sooner
than with httpx, docs/scale.md).
"""

from __future__ import annotations

import base64
import html
import http.client
import json
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import msgspec

from herder.core import gcpause, ports, roles, untrusted
from herder.core.errors import HerderError
from herder.core.http_pool import Answer, ConnectionPool

RAPI_VERSION = 2
DEFAULT_URL = f"https://127.0.0.1:{ports.MASTERD}"
RAPI_USERS_FILE = "rapi_users"
CERT_FILE = "server.pem"
USER_AGENT = "herder-rapi-client/1"

# Job states (Ganeti's JOB_STATUS_*); the final ones end `wait_for_job`.
JOB_STATUS_QUEUED = "queued"
JOB_STATUS_WAITING = "waiting"
JOB_STATUS_CANCELING = "canceling"
JOB_STATUS_RUNNING = "running"
JOB_STATUS_SUCCESS = "success"
JOB_STATUS_ERROR = "error"
JOB_STATUS_CANCELED = "canceled"
JOB_STATUS_FINAL = frozenset({JOB_STATUS_SUCCESS, JOB_STATUS_ERROR, JOB_STATUS_CANCELED})
JOB_WATCH_GRACE = 180.0  # seconds a followed job's polls may go unanswered (masterd restarting)
JOB_WATCH_PAUSE = 2.0  # seconds between such polls

# Node roles as `GET/PUT /2/nodes/<name>/role` spell them.
NODE_ROLES = tuple(roles.NAMES.values())

QPARAM_DRY_RUN = "dry-run"
QPARAM_FORCE = "force"
REQ_DATA_VERSION_FIELD = "__version__"

JobId = int
QueryArg = str | int | bool | None
Query = Mapping[str, QueryArg] | Sequence[tuple[str, QueryArg]]
LogEntry = list[Any]  # [serial, [seconds, microseconds], type, message]

class RapiError(HerderError):
    """A RAPI call failed. `status` is the HTTP status, or None when no answer came at all.

    `job_id` and `job` are set when the error reports a job that failed (`wait_for_job` with
    `raise_on_error=True`); `body` holds the decoded error body of an HTTP error.
    """

    def __init__(
        self,
        message: str,
        status: int | None = None,
        *,
        body: Any = None,
        job_id: JobId | None = None,
        job: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(_one_line(message))
        self.status = status
        self.body = body
        self.job_id = job_id
        self.job = job


# ---- pure helpers, shared with any other transport ----


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def encode_query(query: Query | None) -> list[tuple[str, str]]:
    """Query arguments the way Ganeti encodes them: booleans as 0/1, None as empty."""
    if not query:
        return []
    items: Iterable[tuple[str, QueryArg]] = (
        query.items() if isinstance(query, Mapping) else query
    )
    encoded: list[tuple[str, str]] = []
    for name, value in items:
        if value is None:
            encoded.append((name, ""))
        elif isinstance(value, bool):
            encoded.append((name, str(int(value))))
        elif isinstance(value, str | int | float):
            encoded.append((name, str(value)))
        else:
            raise TypeError(f"invalid query value for {name!r}: {type(value).__name__}")
    return encoded


def error_message(status: int, reason: str, content: bytes) -> tuple[str, Any]:
    """The one-line server message of an error answer, and its decoded body.

    Understands Ganeti's `{"code", "message", "explain"}`, herder's `{"error", "message"}` and
    plain text.
    """
    text = content.decode("utf-8", errors="replace").strip()
    try:
        body: Any = untrusted.loads(text) if text else None
    except ValueError:
        body = text
    if isinstance(body, dict) and ("message" in body or "error" in body or "explain" in body):
        message = html.unescape(str(body.get("message") or "")).strip()
        extra = body.get("explain") if "explain" in body else body.get("error")
        extra_text = html.unescape(str(extra)).strip() if extra not in (None, "") else ""
        if message and extra_text and extra_text != message:
            detail = f"{message} ({extra_text})"
        else:
            detail = message or extra_text or reason
    elif isinstance(body, str) and body:
        first = next((line.strip() for line in body.splitlines() if line.strip()), "")
        detail = html.unescape(first)[:300]
    elif body is not None:
        detail = _one_line(json.dumps(body))[:300]
    else:
        detail = reason
    return _one_line(detail or reason or "no message"), body


def parse_answer(method: str, path: str, status: int, reason: str, content: bytes,
                 answer_type: Any = None) -> Any:
    """The decoded JSON of a 2xx answer; a RapiError for anything else. Decoded with msgspec
    (a bulk instance list of 10,000 is 14 MB: 0.5 s with `json`, a third of it with msgspec),
    without cyclic garbage collection (the collector would walk the growing answer again and
    again: half the time); a number msgspec does not take (past a double's range) falls back
    to `json`'s reading. With `answer_type` (a type of bounded nesting:
    `untrusted.decode_bounded`) the answer is that type's value, validated."""
    if 200 <= status < 300:
        if not content.strip():
            return None
        with gcpause.paused():  # what decoding makes holds no reference cycles
            return _decoded(method, path, content, status, answer_type)
    detail, body = error_message(status, reason, content)
    raise RapiError(f"RAPI {method} {path} failed: {status} {detail}", status, body=body)


# The largest answer decoded: a bulk instance list of 50,000 instances is ~70 MB (the other
# edges' default limit, `untrusted.MAX_BYTES`, is 64 MB)
ANSWER_MAX_BYTES = 1 << 30


def _decoded(method: str, path: str, content: bytes, status: int,
             answer_type: Any | None) -> Any:
    limit = ANSWER_MAX_BYTES
    try:
        if answer_type is not None:
            return untrusted.decode_bounded(content, answer_type, max_bytes=limit)
        try:
            return untrusted.decode(content, max_bytes=limit)
        except msgspec.ValidationError:
            return untrusted.loads(content, max_bytes=limit)
    except msgspec.ValidationError as err:
        raise RapiError(f"RAPI {method} {path}: unexpected answer: {err}", status) from None
    except untrusted.BadDocument as err:
        if len(content) > limit:
            raise RapiError(f"RAPI {method} {path}: {err}", status) from None
        raise RapiError(
            f"RAPI {method} {path}: answer is not JSON: {content[:80]!r}", status
        ) from None
    except ValueError:
        raise RapiError(
            f"RAPI {method} {path}: answer is not JSON: {content[:80]!r}", status
        ) from None


def job_error_message(job: Mapping[str, Any]) -> str:
    """A one-line description of why a job did not succeed, from its `opresult`/`opstatus`."""
    opstatus = job.get("opstatus") or []
    opresult = job.get("opresult") or []
    messages: list[str] = []
    for index, status in enumerate(opstatus):
        if status == JOB_STATUS_SUCCESS:
            continue
        result = opresult[index] if index < len(opresult) else None
        messages.append(_format_op_error(result) or f"opcode {index} {status}")
    if not messages:
        messages.append(f"status {job.get('status')}")
    return _one_line("; ".join(messages))


def _format_op_error(result: Any) -> str:
    # Ganeti encodes a failed opcode's result as [exception class, [args...]].
    if (
        isinstance(result, list | tuple)
        and len(result) == 2
        and isinstance(result[0], str)
        and isinstance(result[1], list | tuple)
    ):
        args = [str(a) for a in result[1]]
        if not args:
            return result[0]
        text = f"{result[0]}: {args[0]}"
        return text + (f" ({', '.join(args[1:])})" if len(args) > 1 else "")
    if isinstance(result, dict):
        return str(result.get("message") or result.get("error") or json.dumps(result))
    if result is None:
        return ""
    return str(result)


def _connection_reason(exc: OSError | http.client.HTTPException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        return f"TLS certificate not trusted ({text})"
    if isinstance(exc, TimeoutError):
        return f"timed out ({text})" if text not in ("timed out", type(exc).__name__) \
            else "timed out"
    if isinstance(exc, http.client.RemoteDisconnected | http.client.IncompleteRead):
        return f"the connection closed before a whole answer ({text})"
    return text


def tls_context(ca_file: str | Path, check_hostname: bool = True) -> ssl.SSLContext:
    """An SSL context trusting only `ca_file` (a PEM file; a key in it is ignored). Given the
    file, `create_default_context` loads no system CAs (loading them costs a CLI command
    50-200 ms, and they must not be trusted here)."""
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise RapiError(f"cannot load the RAPI certificate {ca_file}: {exc}") from None
    context.check_hostname = check_hostname
    return context


def read_rapi_users(path: Path) -> list[tuple[str, str, list[str]]]:
    """Ganeti's users file: `user password [option,...]` lines, `#` comments; in file order."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise RapiError(f"cannot read RAPI users file {path}: {exc.strerror or exc}") from None
    users: list[tuple[str, str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 2:
            continue
        options = [o.strip() for o in parts[2].split(",")] if len(parts) == 3 else []
        users.append((parts[0], parts[1], options))
    return users


def _clear_password(user: str, stored: str, path: Path) -> str:
    if stored.startswith("{"):
        end = stored.find("}")
        scheme = stored[: end + 1].upper() if end > 0 else ""
        if scheme == "{CLEARTEXT}":
            return stored[end + 1 :]
        raise RapiError(
            f"RAPI user {user!r} in {path} has a {scheme or 'hashed'} password; the client needs "
            "the clear-text password: pass username/password explicitly"
        )
    return stored


class RapiClient:
    """A synchronous RAPI client; thread-safe (its kept connections are shared).

    `verify` is True (system CAs), False (no verification) or the path of a CA/certificate PEM
    file; `check_hostname=False` keeps chain verification but skips the name check (cluster
    certificates name the cluster, not the address dialled). `reason`, when set, is sent as
    Ganeti's `reason` query parameter with every write, so it lands in the jobs' reason trails.
    """

    def __init__(
        self,
        base_url: str,
        username: str | None = None,
        password: str | None = None,
        *,
        verify: bool | str | Path | ssl.SSLContext = True,
        timeout: float = 60.0,
        check_hostname: bool = True,
        reason: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.timeout = timeout
        self.reason = reason
        tls: ssl.SSLContext
        if isinstance(verify, ssl.SSLContext):
            tls = verify
        elif isinstance(verify, str | Path):
            tls = tls_context(verify, check_hostname)
        elif verify:
            tls = ssl.create_default_context()
            tls.check_hostname = check_hostname
        else:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
        self._tls: ssl.SSLContext | bool = tls if verify is not False else False
        self._auth_header = None if username is None else "Basic " + base64.b64encode(
            f"{username}:{password or ''}".encode()).decode("ascii")
        self._headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self._auth_header is not None:
            self._headers["Authorization"] = self._auth_header
        try:
            self._pool = ConnectionPool(self.base_url, tls)
        except ValueError as exc:
            raise RapiError(f"RAPI URL {base_url!r}: {exc}") from None

    @classmethod
    def for_herder_cluster(
        cls,
        config_dir: Path,
        url: str | None = None,
        *,
        user: str | None = None,
        timeout: float = 60.0,
        reason: str | None = None,
    ) -> RapiClient:
        """A client for this herder cluster: credentials from `rapi_users`, TLS from `server.pem`.

        Takes `user` if given, else the first user with the `write` option, else the first user.
        """
        users_path = Path(config_dir) / RAPI_USERS_FILE
        users = read_rapi_users(users_path)
        if user is not None:
            chosen = next((u for u in users if u[0] == user), None)
            if chosen is None:
                raise RapiError(f"no RAPI user {user!r} in {users_path}")
        else:
            chosen = next((u for u in users if "write" in u[2]), users[0] if users else None)
            if chosen is None:
                raise RapiError(f"no RAPI user in {users_path}")
        password = _clear_password(chosen[0], chosen[1], users_path)
        cert = Path(config_dir) / CERT_FILE
        if not cert.is_file():
            raise RapiError(f"cluster certificate {cert} is missing")
        return cls(
            url or DEFAULT_URL,
            chosen[0],
            password,
            verify=tls_context(cert, check_hostname=False),
            timeout=timeout,
            reason=reason,
        )

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> RapiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RapiClient({self.base_url!r}, user={self.username!r})"

    # ---- the one place that talks HTTP ----

    def request(
        self,
        method: str,
        path: str,
        query: Query | None = None,
        body: Any = None,
        *,
        timeout: float | None = None,
        answer_type: Any = None,
    ) -> Any:
        """Send one request; the decoded JSON answer, or RapiError. `body` None sends none.
        `answer_type`: decode and validate the answer as this type (`parse_answer`)."""
        answer = self.request_answer(method, path, query, body, timeout=timeout)
        return parse_answer(method.upper(), path, answer.status, answer.reason, answer.content,
                            answer_type)

    def request_answer(self, method: str, path: str, query: Query | None = None,
                       body: Any = None, *, timeout: float | None = None) -> Answer:
        """`request`'s request, its answer undecoded (any status), for a caller that decodes
        it its own way (then `parse_answer`)."""
        if not path.startswith("/"):
            path = "/" + path
        params = encode_query(query)
        if self.reason and method.upper() != "GET" and not any(k == "reason" for k, _ in params):
            params.append(("reason", self.reason))
        content: bytes | None = None
        headers: dict[str, str] = {}
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return self.send(method, path, params, content, headers, timeout=timeout)

    def send(
        self,
        method: str,
        path: str,
        params: Sequence[tuple[str, str]] = (),
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> Answer:
        """The one place that talks HTTP: one request, its whole answer undecoded (any
        status); RapiError when no answer came."""
        target = path + ("?" + urlencode(params, quote_via=quote) if params else "")
        try:
            return self._pool.send(method.upper(), target, content,
                                   {**self._headers, **(headers or {})},
                                   timeout if timeout is not None else self.timeout)
        except (OSError, http.client.HTTPException) as exc:
            raise RapiError(
                f"cannot reach RAPI at {self.base_url}: {_connection_reason(exc)}"
            ) from exc

    def _job(self, method: str, path: str, query: Query | None = None, body: Any = None) -> JobId:
        return _job_id(self.request(method, path, query, body), method, path)

    # ---- cluster ----

    def get_version(self) -> int:
        return int(self.request("GET", "/version"))

    def get_features(self) -> list[str]:
        try:
            return list(self.request("GET", "/2/features"))
        except RapiError as exc:
            if exc.status == 404:
                return []
            raise

    def get_info(self) -> dict[str, Any]:
        return _dict(self.request("GET", "/2/info"), "/2/info")

    def modify_cluster(self, dry_run: bool = False, **fields: Any) -> JobId:
        return self._job("PUT", "/2/modify", _flags(dry_run=dry_run), fields)

    def get_cluster_tags(self) -> list[str]:
        return list(self.request("GET", "/2/tags"))

    def add_cluster_tags(self, tags: Iterable[str], dry_run: bool = False) -> JobId:
        return self._job("PUT", "/2/tags", _tag_query(tags, dry_run))

    def delete_cluster_tags(self, tags: Iterable[str], dry_run: bool = False) -> JobId:
        return self._job("DELETE", "/2/tags", _tag_query(tags, dry_run))

    # ---- nodes ----

    def get_nodes(self, bulk: bool = False) -> list[Any]:
        """Node names, or with `bulk` one dict per node."""
        nodes = self.request("GET", "/2/nodes", _flags(bulk=bulk))
        return list(nodes) if bulk else [n["id"] for n in nodes]

    def get_node(self, name: str) -> dict[str, Any]:
        path = f"/2/nodes/{_seg(name)}"
        return _dict(self.request("GET", path), path)

    def get_node_role(self, name: str) -> str:
        return str(self.request("GET", f"/2/nodes/{_seg(name)}/role"))

    def set_node_role(
        self, name: str, role: str, force: bool = False, auto_promote: bool | None = None
    ) -> JobId:
        query: list[tuple[str, QueryArg]] = []
        if force:
            query.append((QPARAM_FORCE, 1))
        if auto_promote is not None:
            query.append(("auto-promote", auto_promote))
        return self._job("PUT", f"/2/nodes/{_seg(name)}/role", query, role)

    def modify_node(self, name: str, dry_run: bool = False, **fields: Any) -> JobId:
        """`POST /2/nodes/<name>/modify` with OpNodeSetParams fields (drained, offline, ...)."""
        return self._job("POST", f"/2/nodes/{_seg(name)}/modify", _flags(dry_run=dry_run), fields)

    def evacuate_node(
        self,
        name: str,
        mode: str | None = None,
        iallocator: str | None = None,
        remote_node: str | None = None,
        early_release: bool = False,
        dry_run: bool = False,
    ) -> JobId:
        if iallocator and remote_node:
            raise RapiError("evacuate_node: give either iallocator or remote_node, not both")
        body = _present(
            mode=mode, iallocator=iallocator, remote_node=remote_node,
            early_release=early_release or None,
        )
        return self._job(
            "POST", f"/2/nodes/{_seg(name)}/evacuate", _flags(dry_run=dry_run), body
        )

    def migrate_node(
        self,
        name: str,
        mode: str | None = None,
        iallocator: str | None = None,
        target_node: str | None = None,
        dry_run: bool = False,
    ) -> JobId:
        body = _present(mode=mode, iallocator=iallocator, target_node=target_node)
        return self._job("POST", f"/2/nodes/{_seg(name)}/migrate", _flags(dry_run=dry_run), body)

    def get_node_tags(self, name: str) -> list[str]:
        return list(self.request("GET", f"/2/nodes/{_seg(name)}/tags"))

    def add_node_tags(self, name: str, tags: Iterable[str], dry_run: bool = False) -> JobId:
        return self._job("PUT", f"/2/nodes/{_seg(name)}/tags", _tag_query(tags, dry_run))

    def delete_node_tags(self, name: str, tags: Iterable[str], dry_run: bool = False) -> JobId:
        return self._job("DELETE", f"/2/nodes/{_seg(name)}/tags", _tag_query(tags, dry_run))

    # ---- instances ----

    def get_instances(self, bulk: bool = False) -> list[Any]:
        """Instance names, or with `bulk` one dict per instance."""
        instances = self.request("GET", "/2/instances", _flags(bulk=bulk))
        return list(instances) if bulk else [i["id"] for i in instances]

    def get_instance(self, name: str) -> dict[str, Any]:
        path = f"/2/instances/{_seg(name)}"
        return _dict(self.request("GET", path), path)

    def get_instance_console(self, name: str) -> dict[str, Any]:
        """Ganeti's console object of a running instance (kind, host, port, user, command,
        display, message)."""
        path = f"/2/instances/{_seg(name)}/console"
        return _dict(self.request("GET", path), path)

    def get_instance_console_log(self, name: str, lines: int) -> str:
        """herder: the last `lines` lines of the instance's serial console log."""
        path = f"/2/instances/{_seg(name)}/console/log"
        answer = self.send("GET", path, [("lines", str(lines))], headers={"Accept": "text/plain"})
        if answer.status != 200:
            parse_answer("GET", path, answer.status, answer.reason, answer.content)
        return answer.content.decode("utf-8", errors="replace")

    def websocket(self, path: str) -> tuple[str, dict[str, str], ssl.SSLContext | bool]:
        """herder: the URL, headers (credentials) and TLS to open the websocket at `path`."""
        url = self.base_url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        headers = {"User-Agent": USER_AGENT}
        if self._auth_header is not None:
            headers["Authorization"] = self._auth_header
        return url + path, headers, self._tls

    def get_instance_info(self, name: str, static: bool = False) -> JobId:
        """Submits an instance-query job (`GET .../info`); its opresult holds the details."""
        query = [("static", 1)] if static else None
        return self._job("GET", f"/2/instances/{_seg(name)}/info", query)

    def create_instance(
        self,
        mode: str,
        name: str,
        disk_template: str,
        disks: list[dict[str, Any]],
        nics: list[dict[str, Any]],
        dry_run: bool = False,
        **fields: Any,
    ) -> JobId:
        """`POST /2/instances` with a version-1 body; `fields` pass through (os_type,
        beparams, hypervisor, pnode, ip_check, name_check, ...)."""
        body: dict[str, Any] = {
            REQ_DATA_VERSION_FIELD: 1,
            "mode": mode,
            "name": name,
            "disk_template": disk_template,
            "disks": disks,
            "nics": nics,
            **fields,
        }
        return self._job("POST", "/2/instances", _flags(dry_run=dry_run), body)

    def delete_instance(self, name: str, dry_run: bool = False, **fields: Any) -> JobId:
        return self._job(
            "DELETE", f"/2/instances/{_seg(name)}", _flags(dry_run=dry_run), fields or None
        )

    def modify_instance(self, name: str, dry_run: bool = False, **fields: Any) -> JobId:
        return self._job(
            "PUT", f"/2/instances/{_seg(name)}/modify", _flags(dry_run=dry_run), fields
        )

    def rename_instance(
        self, name: str, new_name: str, ip_check: bool = False, name_check: bool = False
    ) -> JobId:
        body = {"new_name": new_name, "ip_check": ip_check, "name_check": name_check}
        return self._job("PUT", f"/2/instances/{_seg(name)}/rename", None, body)

    def startup_instance(
        self, name: str, dry_run: bool = False, no_remember: bool = False, force: bool = False
    ) -> JobId:
        query = _flags(dry_run=dry_run, no_remember=no_remember, force=force)
        return self._job("PUT", f"/2/instances/{_seg(name)}/startup", query)

    def shutdown_instance(
        self, name: str, dry_run: bool = False, no_remember: bool = False, **fields: Any
    ) -> JobId:
        """`fields` go in the body (e.g. `timeout`)."""
        query = _flags(dry_run=dry_run, no_remember=no_remember)
        return self._job("PUT", f"/2/instances/{_seg(name)}/shutdown", query, fields or None)

    def reboot_instance(
        self,
        name: str,
        reboot_type: str | None = None,
        ignore_secondaries: bool | None = None,
        dry_run: bool = False,
        **fields: Any,
    ) -> JobId:
        query: list[tuple[str, QueryArg]] = list(_flags(dry_run=dry_run))
        if reboot_type:
            query.append(("type", reboot_type))
        if ignore_secondaries is not None:
            query.append(("ignore_secondaries", ignore_secondaries))
        return self._job("POST", f"/2/instances/{_seg(name)}/reboot", query, fields or None)

    def migrate_instance(
        self,
        name: str,
        mode: str | None = None,
        cleanup: bool | None = None,
        target_node: str | None = None,
        **fields: Any,
    ) -> JobId:
        body = _present(mode=mode, cleanup=cleanup, target_node=target_node, **fields)
        return self._job("PUT", f"/2/instances/{_seg(name)}/migrate", None, body)

    def failover_instance(
        self,
        name: str,
        iallocator: str | None = None,
        ignore_consistency: bool | None = None,
        target_node: str | None = None,
        **fields: Any,
    ) -> JobId:
        body = _present(
            iallocator=iallocator, ignore_consistency=ignore_consistency,
            target_node=target_node, **fields,
        )
        return self._job("PUT", f"/2/instances/{_seg(name)}/failover", None, body)

    def get_instance_tags(self, name: str) -> list[str]:
        return list(self.request("GET", f"/2/instances/{_seg(name)}/tags"))

    def add_instance_tags(self, name: str, tags: Iterable[str], dry_run: bool = False) -> JobId:
        return self._job("PUT", f"/2/instances/{_seg(name)}/tags", _tag_query(tags, dry_run))

    def delete_instance_tags(
        self, name: str, tags: Iterable[str], dry_run: bool = False
    ) -> JobId:
        return self._job("DELETE", f"/2/instances/{_seg(name)}/tags", _tag_query(tags, dry_run))

    # ---- node groups ----

    def get_groups(self, bulk: bool = False) -> list[Any]:
        """Group names, or with `bulk` one dict per group."""
        groups = self.request("GET", "/2/groups", _flags(bulk=bulk))
        return list(groups) if bulk else [g["name"] for g in groups]

    def get_group(self, name: str) -> dict[str, Any]:
        path = f"/2/groups/{_seg(name)}"
        return _dict(self.request("GET", path), path)

    def create_group(
        self, name: str, alloc_policy: str | None = None, dry_run: bool = False, **fields: Any
    ) -> JobId:
        body = {"name": name, "alloc_policy": alloc_policy, **fields}
        return self._job("POST", "/2/groups", _flags(dry_run=dry_run), body)

    def modify_group(self, name: str, dry_run: bool = False, **fields: Any) -> JobId:
        return self._job("PUT", f"/2/groups/{_seg(name)}/modify", _flags(dry_run=dry_run), fields)

    def rename_group(self, name: str, new_name: str, dry_run: bool = False) -> JobId:
        return self._job(
            "PUT", f"/2/groups/{_seg(name)}/rename", _flags(dry_run=dry_run),
            {"new_name": new_name},
        )

    def delete_group(self, name: str, dry_run: bool = False) -> JobId:
        return self._job("DELETE", f"/2/groups/{_seg(name)}", _flags(dry_run=dry_run))

    def assign_group_nodes(
        self, name: str, nodes: list[str], force: bool = False, dry_run: bool = False
    ) -> JobId:
        return self._job(
            "PUT", f"/2/groups/{_seg(name)}/assign-nodes", _flags(force=force, dry_run=dry_run),
            {"nodes": nodes},
        )

    def get_group_tags(self, name: str) -> list[str]:
        return list(self.request("GET", f"/2/groups/{_seg(name)}/tags"))

    def add_group_tags(self, name: str, tags: Iterable[str], dry_run: bool = False) -> JobId:
        return self._job("PUT", f"/2/groups/{_seg(name)}/tags", _tag_query(tags, dry_run))

    def delete_group_tags(self, name: str, tags: Iterable[str], dry_run: bool = False) -> JobId:
        return self._job("DELETE", f"/2/groups/{_seg(name)}/tags", _tag_query(tags, dry_run))

    # ---- jobs ----

    def get_jobs(self, bulk: bool = False, archived: bool = False) -> list[Any]:
        """Job ids (ints), or with `bulk` one status dict per job; with `archived` (herder's)
        the archive's jobs too."""
        jobs = self.request("GET", "/2/jobs", _flags(bulk=bulk, archived=archived))
        return list(jobs) if bulk else [int(j["id"]) for j in jobs]

    def get_job_status(self, job_id: JobId | str) -> dict[str, Any]:
        """The job's fields (id, ops, status, summary, opstatus, opresult, oplog, *_ts).

        Ganeti answers an unknown id with 200 and every field null: that is a 404 RapiError here.
        """
        path = f"/2/jobs/{_seg(str(job_id))}"
        job = self.request("GET", path)
        if not isinstance(job, dict) or (job.get("status") is None and job.get("ops") is None):
            raise RapiError(f"RAPI GET {path} failed: 404 job {job_id} not found", 404, body=job)
        return job

    def wait_for_job_change(
        self,
        job_id: JobId | str,
        fields: list[str],
        prev_job_info: list[Any] | None,
        prev_log_serial: int | None,
    ) -> dict[str, Any] | None:
        """One long poll: None when nothing changed (the server waits up to ~10 s), else
        `{"job_info": [values of fields], "log_entries": [[serial, [s, us], type, msg], ...]}`."""
        body = {
            "fields": fields,
            "previous_job_info": prev_job_info,
            "previous_log_serial": prev_log_serial,
        }
        path = f"/2/jobs/{_seg(str(job_id))}/wait"
        answer = self.request("GET", path, None, body)
        return None if answer is None else _dict(answer, path)

    def cancel_job(
        self, job_id: JobId | str, dry_run: bool = False, check: bool = False
    ) -> tuple[bool, str]:
        """Ganeti's `(success, message)`; with `check`, a refusal is a RapiError instead."""
        path = f"/2/jobs/{_seg(str(job_id))}"
        answer = self.request("DELETE", path, _flags(dry_run=dry_run))
        if isinstance(answer, list | tuple) and len(answer) == 2:
            ok, message = bool(answer[0]), str(answer[1])
        else:
            ok, message = bool(answer), "" if answer is None else str(answer)
        if check and not ok:
            raise RapiError(
                f"cannot cancel job {job_id}: {message}", body=answer, job_id=int(job_id)
            )
        return ok, message

    def wait_for_job(
        self,
        job_id: JobId | str,
        timeout: float | None = None,
        on_log: Callable[[LogEntry], None] | None = None,
        raise_on_error: bool = False,
        on_retry: Callable[[str], None] | None = None,
        grace: float = JOB_WATCH_GRACE,
    ) -> dict[str, Any]:
        """Follow a job until it is final (success, error, canceled); its status dict.

        `on_log` gets every new log entry in order. With `raise_on_error`, a job that did not
        succeed is a RapiError carrying the job's own error message (`.job_id`, `.job`).
        `timeout` bounds the whole wait (RapiError when exceeded; the job keeps running).

        The job runs in masterd whether or not anyone follows it, so a poll that got no answer
        (masterd restarting, a stall, a dropped connection) is asked again, for up to `grace`
        seconds since the last answer; `on_retry` is told each time (the CLI says it). An
        answer that is an HTTP error ends the wait as before.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        prev_info: list[Any] | None = None
        prev_serial: int | None = None
        answered = time.monotonic()
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                raise RapiError(
                    f"job {job_id} did not finish within {timeout:g} s "
                    f"(last status: {prev_info[0] if prev_info else 'unknown'})",
                    job_id=int(job_id),
                )
            try:
                change = self.wait_for_job_change(job_id, ["status"], prev_info, prev_serial)
            except RapiError as exc:
                if exc.status is not None or time.monotonic() - answered > grace:
                    raise
                if on_retry is not None:
                    on_retry(f"{exc}; following job {job_id} again")
                time.sleep(JOB_WATCH_PAUSE)
                continue
            answered = time.monotonic()
            if change is None:
                continue
            for entry in change.get("log_entries") or []:
                prev_serial = max(int(entry[0]), prev_serial or 0)
                if on_log is not None:
                    on_log(entry)
            info = change.get("job_info")
            if info:
                prev_info = list(info)
                if info[0] in JOB_STATUS_FINAL:
                    break
        job = self.get_job_status(job_id)
        if raise_on_error and job.get("status") != JOB_STATUS_SUCCESS:
            raise RapiError(
                f"job {job_id} {job.get('status')}: {job_error_message(job)}",
                job_id=int(job_id), job=job,
            )
        return job

    # ---- the queue's controls (herder's routes for Ganeti's luxi calls) ----

    def archive_job(self, job_id: JobId | str) -> tuple[bool, str]:
        """luxi ArchiveJob: (success, message)."""
        return _pair(self.request("PUT", f"/2/herder/jobs/{_seg(str(job_id))}/archive"))

    def auto_archive_jobs(self, age: float, timeout: float | None = None) -> tuple[int, int]:
        """luxi AutoArchiveJobs: the finished jobs older than `age` seconds (-1: all) leave
        the queue; (archived, left unexamined)."""
        answer = self.request("PUT", "/2/herder/jobs/autoarchive", None,
                              _present(age=age, timeout=timeout))
        return int(answer[0]), int(answer[1])

    def change_job_priority(self, job_id: JobId | str, priority: int) -> tuple[bool, str]:
        """luxi ChangeJobPriority: (success, message)."""
        return _pair(self.request("PUT", f"/2/herder/jobs/{_seg(str(job_id))}/priority", None,
                                  {"priority": priority}))

    def get_queue(self) -> dict[str, Any]:
        """The queue's state: drained, jobs per status, held jobs and why."""
        return _dict(self.request("GET", "/2/herder/queue"), "/2/herder/queue")

    def set_queue_drained(self, drained: bool) -> bool:
        """luxi SetDrainFlag; the flag as it is now."""
        answer = _dict(self.request("PUT", "/2/herder/queue", None, {"drained": drained}),
                       "/2/herder/queue")
        return bool(answer["drained"])

    # ---- job filter rules (Ganeti's /2/filters) ----

    def get_filters(self, bulk: bool = False) -> list[Any]:
        """Filter rule UUIDs, or with `bulk` each rule's fields."""
        rules = self.request("GET", "/2/filters", _flags(bulk=bulk))
        return list(rules) if bulk else [str(r["uuid"]) for r in rules]

    def get_filter(self, uuid: str) -> dict[str, Any]:
        path = f"/2/filters/{_seg(uuid)}"
        return _dict(self.request("GET", path), path)

    def add_filter(self, priority: int, predicates: list[Any], action: Any,
                   reason_trail: list[Any] | None = None) -> str:
        """A new rule; its UUID."""
        return str(self.request("POST", "/2/filters", None, {
            "priority": priority, "predicates": predicates, "action": action,
            "reason": reason_trail or []}))

    def replace_filter(self, uuid: str, priority: int, predicates: list[Any], action: Any,
                       reason_trail: list[Any] | None = None) -> str:
        """The rule replaced (or made with this UUID); its UUID."""
        return str(self.request("PUT", f"/2/filters/{_seg(uuid)}", None, {
            "priority": priority, "predicates": predicates, "action": action,
            "reason": reason_trail or []}))

    def delete_filter(self, uuid: str) -> None:
        self.request("DELETE", f"/2/filters/{_seg(uuid)}", None, {})

    # ---- herder extensions (/2/herder/...) ----

    def get_herder(self, path: str, query: Query | None = None) -> Any:
        return self.request("GET", _herder_path(path), query)

    def put_herder(self, path: str, body: Any, query: Query | None = None) -> Any:
        return self.request("PUT", _herder_path(path), query, body)


# ---- small helpers ----


def _seg(name: str) -> str:
    """One path segment: names are sent as they are, but never with a slash in them."""
    if not name or "/" in name or name in (".", ".."):
        raise RapiError(f"invalid name for a RAPI path: {name!r}")
    return quote(name, safe="@:+=,-._~")


def _herder_path(path: str) -> str:
    path = path.lstrip("/")
    if path.startswith("2/herder/"):
        path = path[len("2/herder/") :]
    return f"/2/herder/{path}"


def _flags(**flags: bool) -> list[tuple[str, QueryArg]]:
    names = {"dry_run": QPARAM_DRY_RUN}
    return [(names.get(k, k), 1) for k, v in flags.items() if v]


def _tag_query(tags: Iterable[str], dry_run: bool) -> list[tuple[str, QueryArg]]:
    if isinstance(tags, str):
        tags = [tags]
    query: list[tuple[str, QueryArg]] = [("tag", t) for t in tags]
    if not query:
        raise RapiError("no tags given")
    return query + _flags(dry_run=dry_run)


def _pair(answer: Any) -> tuple[bool, str]:
    """Ganeti's (success, message) answers."""
    if isinstance(answer, list | tuple) and len(answer) == 2:
        return bool(answer[0]), str(answer[1])
    raise RapiError(f"expected [success, message], got {_one_line(repr(answer))[:80]}")


def _present(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _dict(answer: Any, path: str) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise RapiError(f"RAPI GET {path}: expected an object, got {_one_line(repr(answer))[:80]}")
    return answer


def _job_id(answer: Any, method: str, path: str) -> JobId:
    try:
        return int(answer)
    except (TypeError, ValueError):
        raise RapiError(f"RAPI {method} {path}: expected a job id, got {answer!r}") from None
