"""The one interface every data collector implements (like node_exporter's Collector).

A collector module in `herder.mond.collectors` defines one or more `Collector` subclasses and
lists them in a module-level `COLLECTORS`; the registry finds them. A collector:

- declares its `name`, `category` (None for none), `kind`, and the named inputs it reads
  (`inputs`: name -> default path or command), which `herder collect --input NAME=FILE` and
  tests override with captured files;
- implements `collect()`, returning the full (verbose) `data`; status collectors include
  `status: {code, message}`. It raises `CollectorError` (or anything) on failure: the runner
  turns that into a status-4 report for this collector only;
- may override `summary(data)`: what a status collector shows without `verbose=1` (by default
  only `status`);
- may override `available()`: False where the thing it watches does not exist on this node
  (no DRBD module, no libvirt), and it is then not offered at all.

Parsing is pure (module-level functions over text); `collect()` only reads and calls them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from herder.core import model as M
from herder.core.errors import HerderError
from herder.mond.report import Kind


class CollectorError(HerderError):
    """A collector could not produce data; the message becomes its report's reason."""


@dataclass
class MondSettings:
    """Node-local settings of the agent (not in the cluster config)."""

    plugin_dir: Path = Path("/etc/herder/mond-plugins")
    diagnose_dir: Path = Path("/etc/ganeti/node-diagnose-commands")
    run_dir: Path = Path("/run/herder")
    command_timeout: float = 10.0  # seconds any external command may take
    plugin_timeout: float = 10.0
    diagnose_timeout: float = 30.0
    collector_timeout: float = 30.0  # a run still going after this is reported as hung
    libvirt_uri: str | None = None  # None: libvirt's default for this host


@dataclass
class CollectContext:
    """What a collector may use. Built once by the daemon or `herder collect`."""

    node_name: str = field(default_factory=socket.getfqdn)
    settings: MondSettings = field(default_factory=MondSettings)
    # Overrides of a collector's named inputs (captured files, in tests and stand-alone runs).
    inputs: Mapping[str, Path] = field(default_factory=dict)
    config_loader: Callable[[], M.ConfigData | None] = lambda: None
    hmac_key_loader: Callable[[], bytes | None] = lambda: None
    clock: Callable[[], float] = time.time

    def config(self) -> M.ConfigData | None:
        """The latest cluster config, or None when this node has none."""
        return self.config_loader()

    def hmac_key(self) -> bytes | None:
        return self.hmac_key_loader()

    def this_node(self) -> M.Node | None:
        config = self.config()
        if config is None:
            return None
        for node in config.nodes.values():
            if node.name == self.node_name:
                return node
        return None

    def input_path(self, name: str, default: str | os.PathLike[str]) -> Path:
        return Path(self.inputs.get(name, default))

    def read_input(self, name: str, default: str | os.PathLike[str]) -> str:
        path = self.input_path(name, default)
        try:
            return path.read_text()
        except FileNotFoundError:
            raise CollectorError(f"{path} does not exist") from None
        except OSError as err:
            raise CollectorError(f"cannot read {path}: {err.strerror}") from None

    def run(self, argv: Sequence[str], *, timeout: float | None = None,
            input_name: str | None = None) -> str:
        """Run a command (or read its captured output from the input `input_name`)."""
        if input_name is not None and input_name in self.inputs:
            return self.read_input(input_name, self.inputs[input_name])
        return run_command(argv, timeout=timeout or self.settings.command_timeout)


def run_command(argv: Sequence[str], *, timeout: float, stdin: str = "",
                env: Mapping[str, str] | None = None) -> str:
    """stdout of a command; a clear CollectorError when it is missing, fails or hangs."""
    try:
        proc = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=timeout,
            env=dict(env) if env is not None else None, check=False,
        )
    except FileNotFoundError:
        raise CollectorError(f"command not found: {argv[0]}") from None
    except PermissionError:
        raise CollectorError(f"command not executable: {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise CollectorError(f"{argv[0]} did not finish within {timeout:g}s") from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        raise CollectorError(f"{argv[0]} failed with exit code {proc.returncode}: {detail}")
    return proc.stdout


class Collector:
    """Base class of every built-in data collector."""

    name: ClassVar[str]
    category: ClassVar[str | None] = None
    kind: ClassVar[Kind] = Kind.PERFORMANCE
    version: ClassVar[str] = "B"
    format_version: ClassVar[int] = 1
    # Named inputs and their defaults, overridable with --input NAME=FILE.
    inputs: ClassVar[Mapping[str, str]] = {}
    # Whether the scheduler may stretch/shrink the interval (diagnose: no).
    adaptive: ClassVar[bool] = True
    # Default interval (seconds) when the cluster config names none.
    default_interval: ClassVar[float] = 5.0

    def __init__(self, ctx: CollectContext) -> None:
        self.ctx = ctx

    def available(self) -> bool:
        return True

    def collect(self) -> Any:
        raise NotImplementedError

    def summary(self, data: Any) -> Any:
        """The non-verbose view of a status collector's data."""
        if self.kind == Kind.STATUS and isinstance(data, Mapping) and "status" in data:
            return {"status": data["status"]}
        return data

    def extra_fields(self, data: Any, timestamp: int) -> dict[str, Any]:
        """Fields added to the report object beside `data` (diagnose: its signature)."""
        return {}

    @classmethod
    def path_category(cls) -> str:
        return cls.category or "default"
