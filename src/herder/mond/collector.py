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

Where the cluster's view comes from (`CollectContext.cluster_source()`): the cluster config when
this node has one (a master candidate's copy); else confd (herder's or Ganeti's,
`MondSettings.confd_peers`, by default the master candidates this node's ssconf names), as
design-monitoring-agent plans for nodes without the config. This node's role (which daemons it
should run) comes from its ssconf files when it has no config. confd answers are cached for
`confd_cache_seconds` (15 s, like Ganeti's mond); a confd failure never reaches the agent: the
collector settings fall back to the defaults and collectors to their no-config behaviour.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from herder.core import confd, envelope, model, ports, ssconf
from herder.core.errors import HerderError
from herder.mond.report import Kind

log = logging.getLogger("herder.mond")


class CollectorError(HerderError):
    """A collector could not produce data; the message becomes its report's reason."""


@dataclass
class RepairSettings:
    """The live-repair route `POST /1/repair` (herder extension; off unless enabled)."""

    enabled: bool = False
    commands_dir: Path = Path("/etc/ganeti/node-repair-commands")  # the white-list directory
    timeout: float = 300.0  # seconds a repair command may run before its group is killed
    max_skew: float = 300.0  # seconds a request's timestamp may differ from this node's clock


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
    # confd peers (`HOST` or `HOST:PORT`) asked when this node has no cluster config.
    confd_peers: list[str] = field(default_factory=list)
    confd_port: int = ports.CONFD
    confd_key_file: Path | None = None  # None: the cluster's key (`hmac_key_file`)
    # The cluster HMAC key: signs the diagnose report, verifies `POST /1/repair`.
    # None: hmac.key beside the cluster config path (Ganeti: /var/lib/ganeti/hmac.key).
    hmac_key_file: Path | None = None
    confd_timeout: float = 2.0  # seconds one confd query may take
    confd_cache_seconds: float = 15.0  # how long a confd answer is reused (Ganeti's mond: 15)
    # The diagnose command's file name when this node has no cluster config (Ganeti's config
    # has no field for it); the cluster config's `maintenance.diagnoseCommand` wins.
    diagnose_command: str = ""
    # Default intervals (seconds) by collector name, used when neither the cluster config nor
    # confd names one (the local config's `diagnose_interval`).
    default_intervals: dict[str, float] = field(default_factory=dict)
    repair: RepairSettings = field(default_factory=RepairSettings)


# Where herder's config document keeps the cluster's self-diagnose command (confd type 10).
DIAGNOSE_COMMAND_PATH = "/maintenance/diagnoseCommand"
CONFD_ERROR_RETRY = 5.0  # seconds before a failed confd query is asked again (at most the TTL)
_Key = tuple[str, str | None]


@dataclass
class _Cached:
    when: float
    value: Any
    error: str | None


class ConfdSource:
    """confd answers for mond, decoded and cached; thread-safe (collectors run in threads).

    Each `get` returns a fresh-enough answer from the cache, else asks confd. With
    `wait=False` a stale answer (or error) is returned at once and refreshed in the
    background, so the agent's event loop only blocks on the very first query. Failures are
    cached too (for at most `CONFD_ERROR_RETRY` seconds) and raised as `confd.ConfdError`.
    """

    def __init__(self, peers: list[str], key_loader: Callable[[], bytes | None], *,
                 port: int = ports.CONFD, timeout: float = 2.0, ttl: float = 15.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.peers = list(peers)
        self.port = port
        self.timeout = timeout
        self.ttl = ttl
        self.clock = clock
        self.key_loader = key_loader
        self._lock = threading.Lock()
        self._cache: dict[_Key, _Cached] = {}
        self._refreshing: set[_Key] = set()
        self._client: confd.ConfdClient | None = None
        self.queries = 0  # confd queries made (tests and debugging)

    def describe(self) -> str:
        return ", ".join(self.peers) + f" (default port {self.port})"

    def client(self) -> confd.ConfdClient:
        key = self.key_loader()
        if key is None:
            raise confd.ConfdError("no HMAC key to sign confd queries with (give --confd-key)")
        with self._lock:
            if self._client is None or self._client.hmac_key != key:
                self._client = confd.ConfdClient(self.peers, key, port=self.port,
                                                 timeout=self.timeout)
            return self._client

    def get(self, what: str, arg: str | None, fetch: Callable[[confd.ConfdClient], Any], *,
            wait: bool = True) -> Any:
        key = (what, arg)
        with self._lock:
            entry = self._cache.get(key)
        if entry is not None:
            age = self.clock() - entry.when
            ttl = self.ttl if entry.error is None else min(self.ttl, CONFD_ERROR_RETRY)
            if age >= ttl:
                if wait:
                    entry = self._refresh(key, fetch)
                else:
                    self._refresh_in_background(key, fetch)
        else:
            entry = self._refresh(key, fetch)
        if entry.error is not None:
            raise confd.ConfdError(entry.error)
        return entry.value

    def _refresh(self, key: _Key, fetch: Callable[[confd.ConfdClient], Any]) -> _Cached:
        try:
            self.queries += 1
            entry = _Cached(self.clock(), fetch(self.client()), None)
        except Exception as err:  # whatever confd does (or sends), mond carries on
            what = key[0] + (f" {key[1]}" if key[1] is not None else "")
            text = str(err) if isinstance(err, confd.ConfdError) else f"confd {what}: {err!r}"
            entry = _Cached(self.clock(), None, text)
        with self._lock:
            self._cache[key] = entry
        return entry

    def _refresh_in_background(self, key: _Key, fetch: Callable[[confd.ConfdClient], Any]) -> None:
        with self._lock:
            if key in self._refreshing:
                return
            self._refreshing.add(key)

        def run() -> None:
            try:
                self._refresh(key, fetch)
            finally:
                with self._lock:
                    self._refreshing.discard(key)

        threading.Thread(target=run, name="confd-refresh", daemon=True).start()

    # --- what mond asks (each raises confd.ConfdError) -----------------------------------------

    def data_collectors(self, *, wait: bool = True) -> dict[str, tuple[bool, float]]:
        """Type 11: collector name -> (active, interval in seconds)."""
        return dict(self.get("data_collectors", None, lambda c: c.data_collectors(), wait=wait))

    def node_drbd(self, node: str, *, wait: bool = True) -> list[list[Any]]:
        """Type 7: Ganeti's pairing rows [node, minor, instance, disk, role, peer]."""
        return list(self.get("node_drbd", node, lambda c: c.node_drbd(node), wait=wait))

    def node_instances(self, node: str, *, wait: bool = True
                       ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Type 8: (primary, secondary) instances of a node, as Ganeti objects."""
        return self.get("node_instances", node, lambda c: c.node_instances(node), wait=wait)

    def config_value(self, path: str, *, wait: bool = True) -> Any:
        """Type 10: the value at a path of the config document (herder's confd; Ganeti's
        answers an argument error for herder's own sections)."""
        return self.get("config_query", path,
                        lambda c: c.query(confd.REQ_CONFIG_QUERY, path).value(), wait=wait)

    def instance_disks(self, instance: str, *, wait: bool = True) -> list[dict[str, Any]]:
        """Type 9: an instance's disks, as Ganeti objects."""
        return list(self.get("instance_disks", instance,
                             lambda c: c.instance_disks(instance), wait=wait))


@dataclass
class CollectContext:
    """What a collector may use. Built once by the daemon or `herder collect`."""

    node_name: str = field(default_factory=socket.getfqdn)
    settings: MondSettings = field(default_factory=MondSettings)
    # Overrides of a collector's named inputs (captured files, in tests and stand-alone runs).
    inputs: Mapping[str, Path] = field(default_factory=dict)
    config_loader: Callable[[], model.ConfigData | None] = lambda: None
    hmac_key_loader: Callable[[], bytes | None] = lambda: None
    clock: Callable[[], float] = time.time
    # The node's ssconf files (its data directory; None: none are read).
    ssconf_dir: Path | None = None
    _confd: ConfdSource | None = field(default=None, init=False, repr=False, compare=False)
    _confd_warned: str | None = field(default=None, init=False, repr=False, compare=False)

    def config(self) -> model.ConfigData | None:
        """The latest cluster config, or None when this node has none."""
        return self.config_loader()

    def hmac_key(self) -> bytes | None:
        return self.hmac_key_loader()

    # --- the cluster's view: the config, else confd --------------------------------------------

    def confd_peers(self) -> list[str]:
        """The confd servers to ask: the configured ones, else the master candidates of this
        node's ssconf (they follow the cluster's changes)."""
        if self.settings.confd_peers:
            return list(self.settings.confd_peers)
        if self.ssconf_dir is None:
            return []
        return ssconf.master_candidates_ips(self.ssconf_dir)

    def confd(self) -> ConfdSource | None:
        """The (cached) confd source, or None when there is no confd peer to ask."""
        settings = self.settings
        peers = self.confd_peers()
        if not peers:
            return None
        if self._confd is None or self._confd.peers != peers:
            self._confd = ConfdSource(
                peers, self._confd_key, port=settings.confd_port,
                timeout=settings.confd_timeout, ttl=settings.confd_cache_seconds,
            )
        return self._confd

    def _confd_key(self) -> bytes | None:
        if self.settings.confd_key_file is not None:
            try:
                return envelope.load_key(self.settings.confd_key_file)
            except HerderError:
                return None
        return self.hmac_key()

    def cluster_source(self) -> str:
        """"config" (this node has the cluster config), "confd" (peers given) or "none"."""
        if self.config() is not None:
            return "config"
        return "confd" if self.confd_peers() else "none"

    def collector_settings(self, name: str, default_interval: float, *,
                           wait: bool = True) -> model.CollectorSettings:
        """How to schedule collector `name`: the config's data_collectors entry, else confd's
        (type 11: active and interval), else the defaults. Never raises: a confd failure is
        logged (once per distinct error) and the defaults apply."""
        default_interval = self.settings.default_intervals.get(name, default_interval)
        default = model.CollectorSettings(interval=default_interval)
        config = self.config()
        if config is not None:
            return config.cluster.data_collectors.get(name, default)
        source = self.confd()
        if source is None:
            return default
        try:
            answer = source.data_collectors(wait=wait)
        except confd.ConfdError as err:
            if str(err) != self._confd_warned:
                self._confd_warned = str(err)
                log.warning("collector settings from confd unavailable, using defaults: %s",
                            err)
            return default
        self._confd_warned = None
        if name not in answer:
            return default
        active, interval = answer[name]
        try:
            return model.CollectorSettings(active=active, interval=interval)
        except ValueError:  # a zero or negative interval: keep the default schedule
            return model.CollectorSettings(active=active, interval=default_interval)

    def diagnose_command(self) -> str:
        """The self-diagnose command's file name: the config's, else the cluster's through
        confd (a node that is no master candidate has no config copy), else this node's
        setting (a Ganeti cluster's confd has none to give). Never raises."""
        config = self.config()
        if config is not None:
            return config.maintenance.diagnose_command
        source = self.confd()
        if source is not None:
            try:
                answer = source.config_value(DIAGNOSE_COMMAND_PATH)
            except confd.ConfdError:
                answer = None
            if isinstance(answer, str):
                return answer
        return self.settings.diagnose_command

    def drbd_pairing(self) -> list[list[Any]]:
        """This node's DRBD minors from confd (type 7), in Ganeti's pairing format
        `[node, minor, instance, disk, role, peer]`; [] when no confd peer is configured.
        Raises CollectorError when confd fails (the caller falls back and says why)."""
        source = self.confd()
        if source is None:
            return []
        try:
            return source.node_drbd(self.node_name)
        except confd.ConfdError as err:
            raise CollectorError(str(err)) from None

    def libvirt_uri(self) -> str | None:
        """The hypervisor to watch: mond's own setting, else this node's `libvirt_uri` node
        parameter (its config copy, else its ssconf), else libvirt's default (None)."""
        if self.settings.libvirt_uri:
            return self.settings.libvirt_uri
        config, node = self.config(), self.this_node()
        if config is not None and node is not None:
            return str(config.filled_ndparams(node).get("libvirt_uri") or "") or None
        if self.ssconf_dir is not None:
            values = ssconf.node_params(self.node_name, self.ssconf_dir) or {}
            return str(values.get("libvirt_uri") or "") or None
        return None

    def role_from_ssconf(self) -> tuple[bool, bool, bool] | None:
        """(master, master candidate, VM-capable) from this node's ssconf; None without it."""
        if self.ssconf_dir is None:
            return None
        master = ssconf.master_node(self.ssconf_dir)
        if master is None:
            return None
        candidates = ssconf.read_lines("master_candidates", self.ssconf_dir) or []
        vm_capable = ssconf.read_lines("vm_capable_nodes", self.ssconf_dir) or []
        return (master == self.node_name, self.node_name in candidates,
                self.node_name in vm_capable)

    def this_node(self) -> model.Node | None:
        config = self.config()
        if config is None:
            return None
        for node in config.nodes.values():
            if node.name == self.node_name:
                return node
        return None

    def instance_lvs(self) -> dict[tuple[str, str], str]:
        """(vg, lv) -> instance name for the instances on this node (primary or secondary),
        plain disks and DRBD children alike, from confd (types 8 and 9); {} when no confd peer
        is configured. Raises CollectorError when confd fails."""
        source = self.confd()
        if source is None:
            return {}
        owners: dict[tuple[str, str], str] = {}

        def walk(disks: Any, instance: str) -> None:
            for disk in disks if isinstance(disks, list) else ():
                if not isinstance(disk, Mapping):
                    continue
                lid = disk.get("logical_id")
                if (disk.get("dev_type") in ("plain", "lvm") and isinstance(lid, list)
                        and len(lid) == 2 and all(isinstance(x, str) for x in lid)):
                    owners[(lid[0], lid[1])] = instance
                walk(disk.get("children"), instance)

        try:
            primary, secondary = source.node_instances(self.node_name)
            for inst in [*primary, *secondary]:
                name = inst.get("name") if isinstance(inst, Mapping) else None
                if isinstance(name, str):
                    walk(source.instance_disks(name), name)
        except (confd.ConfdError, TypeError, ValueError) as err:
            raise CollectorError(str(err)) from None
        return owners

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
    # Default interval (seconds) when neither the cluster config nor confd names one: a
    # built-in collector's comes from core's table (model.DEFAULT_COLLECTOR_INTERVALS, also
    # what new cluster configs get), so it is not set here; another collector may set its own.
    default_interval: ClassVar[float | None] = None

    @classmethod
    def interval_default(cls) -> float:
        if cls.default_interval is not None:
            return cls.default_interval
        return model.DEFAULT_COLLECTOR_INTERVALS.get(cls.name, model.MOND_TIME_INTERVAL)

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
