"""RAPI users: Ganeti's `rapi_users` file and HTTP Basic authentication.

Each line: `user password [option,...]`; `#` starts a comment. A password is plain text,
`{CLEARTEXT}text`, or `{HA1}hex` = md5("user:Ganeti Remote API:password"). The option `write`
allows changes; without it a user may only read. The file is re-read when it changes.
masterd's RAPI and maintd's HTTPS changes (the incidents' cancel) check their callers with it,
through the back-off against guessing (`core.login_backoff`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path

REALM = "Ganeti Remote API"


@dataclass(frozen=True)
class User:
    name: str
    password: str
    options: frozenset[str]

    @property
    def can_write(self) -> bool:
        return "write" in self.options

    def check(self, password: str) -> bool:
        stored = self.password
        if stored.upper().startswith("{HA1}"):
            digest = hashlib.md5(f"{self.name}:{REALM}:{password}".encode()).hexdigest()
            return hmac.compare_digest(digest, stored[5:].lower())
        if stored.upper().startswith("{CLEARTEXT}"):
            stored = stored[11:]
        return hmac.compare_digest(stored.encode(), password.encode())


def parse_users(text: str) -> dict[str, User]:
    users: dict[str, User] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) < 2:
            continue
        options = frozenset(o.strip().lower() for o in ",".join(parts[2:]).split(",") if o)
        users[parts[0]] = User(parts[0], parts[1], options)
    return users


class UsersFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, User] = {}

    def users(self) -> dict[str, User]:
        try:
            st = self.path.stat()
        except OSError:
            self._users, self._stamp = {}, None
            return self._users
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                self._users = parse_users(self.path.read_text())
            except OSError:
                self._users = {}
            self._stamp = stamp
        return self._users

    def check(self, name: str, password: str) -> User | None:
        """The user `name` when `password` is theirs, else None."""
        user = self.users().get(name)
        return user if user is not None and user.check(password) else None

    @staticmethod
    def basic_credentials(header: str | None) -> tuple[str, str] | None:
        """(user, password) of an `Authorization: Basic ...` header, None: no such header."""
        if not header or not header.lower().startswith("basic "):
            return None
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        name, sep, password = decoded.partition(":")
        return (name, password) if sep else None
