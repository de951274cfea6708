"""The operator's client profile: how the CLI reaches a cluster from a machine that is no node
of it (docs/real-nodes.md "The operator's CLI"). The CLI reads it, the simulator writes one.

Environment variables, each overriding the profile file's value:

    HERDER_MASTERD             masterd's RAPI URL, e.g. https://cluster.example.com:5080
    HERDER_RAPI_CA             the cluster certificate to pin (the host name is not checked)
    HERDER_RAPI_USER           a RAPI user (of the master's rapi_users)
    HERDER_RAPI_PASSWORD_FILE  a file holding that user's password
    HERDER_CLIENT              a profile file (TOML) with the same, every key optional:

        masterd = "https://127.0.0.11:5080"
        ca = "/tmp/herder-sim/client/cluster.pem"
        user = "admin"
        password_file = "/tmp/herder-sim/client/rapi-password"
        maintd = "http://127.0.0.11:1816"   # default: the master's address, port 1816
        [nodes]                             # where a node is reached from here (default:
        "node1.example.com" = "127.0.0.12"  # its primary IP, as the cluster knows it)

A relative path in the file is relative to the file. Without credentials here the CLI uses the
files beside the cluster config (on the master: /var/lib/herder), as always.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import msgspec

from herder.core import settingsfile
from herder.core.errors import HerderError

WHAT = "client profile"
ENV_FILE = "HERDER_CLIENT"
ENV = {"masterd": "HERDER_MASTERD", "ca": "HERDER_RAPI_CA", "user": "HERDER_RAPI_USER",
       "password_file": "HERDER_RAPI_PASSWORD_FILE"}

_Text = Annotated[str, msgspec.Meta(min_length=1)]


class ProfileFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    masterd: _Text | None = None
    ca: _Text | None = None
    user: _Text | None = None
    password_file: _Text | None = None
    maintd: _Text | None = None
    nodes: dict[str, _Text] = {}


@dataclass(frozen=True)
class Profile:
    masterd: str | None = None
    ca: Path | None = None
    user: str | None = None
    password_file: Path | None = None
    maintd: str | None = None
    nodes: dict[str, str] = field(default_factory=dict)

    @property
    def has_credentials(self) -> bool:
        return self.ca is not None and self.user is not None and self.password_file is not None

    def password(self) -> str:
        assert self.password_file is not None
        try:
            return self.password_file.read_text().strip()
        except OSError as err:
            raise HerderError(f"cannot read the RAPI password file {self.password_file}: "
                              f"{err.strerror}") from None

    def node_address(self, name: str, primary_ip: str | None) -> str | None:
        """Where node `name` is reached from here: the profile's map (by the full name, else
        the first label), else its primary IP."""
        if name in self.nodes:
            return self.nodes[name]
        short = [a for known, a in self.nodes.items() if known.split(".")[0] == name]
        return short[0] if len(short) == 1 else primary_ip


def _resolved(base: Path, value: str | None) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    return path if path.is_absolute() else base / path


def load(environ: dict[str, str] | None = None) -> Profile:
    """The profile: the environment over the file HERDER_CLIENT names (if any)."""
    env = os.environ if environ is None else environ
    read = ProfileFile()
    base = Path.cwd()
    location = env.get(ENV_FILE)
    if location:
        path = Path(location)
        if not path.is_file():
            raise HerderError(f"{WHAT} {path} ({ENV_FILE}) does not exist")
        read = settingsfile.load(path, ProfileFile, WHAT)
        base = path.parent
    return Profile(
        masterd=env.get(ENV["masterd"]) or read.masterd,
        ca=_resolved(Path.cwd(), env.get(ENV["ca"])) or _resolved(base, read.ca),
        user=env.get(ENV["user"]) or read.user,
        password_file=(_resolved(Path.cwd(), env.get(ENV["password_file"]))
                       or _resolved(base, read.password_file)),
        maintd=read.maintd, nodes=dict(read.nodes))


def write(path: Path, profile: Profile) -> None:
    """Write a profile file (the simulator's; mode 0600: it names the password file)."""
    lines = []
    for key in ("masterd", "ca", "user", "password_file", "maintd"):
        value = getattr(profile, key)
        if value is not None:
            lines.append(f"{key} = {_toml(str(value))}")
    if profile.nodes:
        lines += ["", "[nodes]"]
        lines += [f"{_toml(name)} = {_toml(address)}"
                  for name, address in sorted(profile.nodes.items())]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


def _toml(text: str) -> str:
    return msgspec.json.encode(text).decode()  # a JSON string is a TOML basic string
