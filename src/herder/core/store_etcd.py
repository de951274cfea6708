"""The config store in etcd: `EtcdStore`, the same `ConfigStore` interface as `FileStore`.

Switching is one setting: a config location `etcds://HOST:PORT[,HOST:PORT...]/CLUSTER` (in
`--config` or `HERDER_CONFIG`) opens an `EtcdStore` (see `herder.core.store.open_store`), over
HTTPS with a client certificate and etcd's authentication, as the client settings file says
(`herder.core.etcd_settings`); `etcd://` is the same over plain HTTP without authentication, for
tests on loopback only. Any other location is a file, as before. The document is stored at
`/herder/<CLUSTER>/config`, encoded as the file would be. Secrets (the HMAC key, certificates)
are not in etcd: they stay in the local directory (`directory`, default /var/lib/herder).

A change is made in three layers:
- **lock**: writers serialize on `/herder/<CLUSTER>/lock`, created if absent and attached to a
  short lease of their own (released by revoking the lease, so a writer that dies frees it within
  `lock_ttl` seconds); waiting writers retry with a small jittered backoff;
- **compare-and-swap**: the put is a transaction that compares the document's mod_revision with
  the one read, so even a writer whose lock expired cannot overwrite a newer document — that write
  fails with "concurrent write" and nothing is written;
- **fence** (optional, a `herder.core.lease.Fence` or `MasterLease`): the same transaction also
  compares the master key's value and create_revision with the writer's node and epoch, so an old
  master's write is refused by etcd itself ("not the master"), however late it arrives.

A transaction whose reply was lost (a member died) may have been applied: the store then reads
the document back and counts it as written only if it holds exactly the bytes it sent, so a write is
never lost or applied twice.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from herder.core import etcd, etcd_settings, model, upgrade
from herder.core.errors import ConfigError, StoreError
from herder.core.lease import Fence, MasterLease, master_key, resolve_fence
from herder.core.store import ETCD_SCHEMES, is_etcd_location

SECURE, PLAIN = ETCD_SCHEMES  # etcds://: TLS and authentication; etcd://: tests only
DEFAULT_LOCK_TTL = 5
DEFAULT_LOCK_WAIT = 30.0
DEFAULT_LOCAL_DIR = Path("/var/lib/herder")
_FORM = "etcds://HOST:PORT[,HOST:PORT...]/CLUSTER"


def parse_location(location: str) -> tuple[list[str], str]:
    """`etcds://h1:2379,h2:2379/cluster` -> (["https://h1:2379", "https://h2:2379"], "cluster");
    `etcd://...` gives http:// endpoints."""
    if not is_etcd_location(location):
        raise StoreError(f"{location!r} is not an etcd location ({_FORM})")
    scheme = SECURE if location.startswith(SECURE) else PLAIN
    rest = location[len(scheme):]
    hosts, sep, cluster = rest.partition("/")
    cluster = cluster.strip("/")
    endpoints = [h.strip() for h in hosts.split(",") if h.strip()]
    if not sep or not cluster or "/" in cluster or not endpoints:
        raise StoreError(f"bad etcd location {location!r}: expected {_FORM} (or etcd:// for "
                         "plain HTTP)")
    http = "https" if scheme == SECURE else "http"
    return [f"{http}://{h}" for h in endpoints], cluster


def open_client(location: str, *, client_settings: Path | None = None,
                **options: Any) -> tuple[etcd.EtcdClient, str]:
    """The client of an etcd location and its cluster name: an `etcds://` one with the TLS
    settings and credentials of its client settings file (`client_settings`, default
    HERDER_ETCD_CLIENT or /etc/herder/etcd-client.toml); `options` as for `EtcdClient`."""
    endpoints, cluster = parse_location(location)
    if location.startswith(SECURE):
        return etcd_settings.client(endpoints, client_settings, **options), cluster
    return etcd.EtcdClient(endpoints, **options), cluster


class EtcdStore:
    """The config document in etcd, at /herder/<cluster>/config."""

    def __init__(
        self,
        client: etcd.EtcdClient,
        cluster: str,
        *,
        fence: Fence | MasterLease | None = None,
        local_dir: str | os.PathLike[str] = DEFAULT_LOCAL_DIR,
        lock_ttl: int = DEFAULT_LOCK_TTL,
        lock_wait: float = DEFAULT_LOCK_WAIT,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.fence = fence
        self.key = f"/herder/{cluster}/config"
        self.lock_key = f"/herder/{cluster}/lock"
        self.master_key = master_key(cluster)
        self.lock_ttl = lock_ttl
        self.lock_wait = lock_wait
        self._local_dir = Path(local_dir)

    @classmethod
    def from_location(cls, location: str, **kwargs: Any) -> EtcdStore:
        """The store at `location`; `kwargs` as for the constructor."""
        client, cluster = open_client(location)
        return cls(client, cluster, **kwargs)

    @property
    def location(self) -> str:
        hosts = ",".join(e.split("://", 1)[-1] for e in self.client.endpoints)
        return f"{SECURE if self.client.secure else PLAIN}{hosts}/{self.cluster}"

    def __repr__(self) -> str:
        return f"EtcdStore({self.location!r})"

    @property
    def directory(self) -> Path:
        """The local directory for what is not in etcd (secrets, certificates)."""
        return self._local_dir

    @property
    def path(self) -> Path:
        """A local anchor beside which the secrets live (the document itself is in etcd)."""
        return self._local_dir / f"etcd-{self.cluster}"

    def exists(self) -> bool:
        return self.client.get(self.key) is not None

    # --- reading --------------------------------------------------------------------------------

    def _read(self) -> etcd.KeyValue:
        kv = self.client.get(self.key)
        if kv is None:
            raise StoreError(
                f"no cluster config at {self.location} (create one with 'herder cluster init "
                "NAME', or point --config / HERDER_CONFIG at it)"
            )
        return kv

    def _decode(self, raw: bytes) -> model.ConfigData:
        if not raw.strip():
            raise ConfigError(f"{self.location}: the config document is empty")
        try:
            return upgrade.load_document(raw)
        except ConfigError as err:
            raise ConfigError(f"{self.location}: {err}") from None

    def load(self) -> model.ConfigData:
        return self._decode(self._read().value)

    def load_with_revision(self) -> tuple[model.ConfigData, int]:
        kv = self._read()
        return self._decode(kv.value), kv.mod_revision

    # --- writing --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the writers' lock key (waits for other writers, up to `lock_wait` seconds)."""
        lease = self.client.lease_grant(self.lock_ttl)
        token = f"{os.getpid()}-{lease.id:x}"
        deadline = time.monotonic() + self.lock_wait
        delay = 0.005
        try:
            while True:
                result = self.client.txn(
                    [etcd.cmp_create(self.lock_key, 0)],
                    [etcd.op_put(self.lock_key, token, lease.id)],
                    [etcd.op_range(self.lock_key)],
                )
                if result.succeeded:
                    break
                kv = result.ranges[0].first if result.ranges else None
                if kv is not None and kv.value.decode() == token:  # a retried txn that won
                    break
                if time.monotonic() >= deadline:
                    holder = kv.value.decode() if kv else "?"
                    raise StoreError(
                        f"{self.location}: another writer ({holder}) holds the config lock "
                        f"for more than {self.lock_wait:g} s"
                    )
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.1)
            yield
        finally:
            with contextlib.suppress(etcd.EtcdError):
                self.client.lease_revoke(lease.id)  # deletes the lock key with it

    def _fence(self) -> Fence | None:
        return resolve_fence(self.fence, self.location)

    def _put(self, data: bytes, compare: list[dict[str, object]], what: str) -> None:
        """Put the document if `compare` (and the fence) hold; explain a refusal."""
        fence = self._fence()
        checks = list(compare)
        if fence is not None:
            checks += [
                etcd.cmp_value(self.master_key, fence.node_name),
                etcd.cmp_create(self.master_key, fence.epoch),
            ]
        try:
            result = self.client.txn(checks, [etcd.op_put(self.key, data)],
                                     [etcd.op_range(self.key), etcd.op_range(self.master_key)])
        except etcd.EtcdError as err:
            raise StoreError(f"{self.location}: {what} failed, maybe not written: {err}") from None
        if result.succeeded:
            return
        current = result.ranges[0].first if result.ranges else None
        if current is not None and current.value == data:
            return  # our own write, applied before its reply was lost
        master = result.ranges[1].first if len(result.ranges) > 1 else None
        if fence is not None and (
            master is None or master.value.decode() != fence.node_name
            or master.create_revision != fence.epoch
        ):
            now = (f"{master.value.decode()} (epoch {master.create_revision})"
                   if master else "nobody")
            raise StoreError(
                f"{self.location}: {fence.node_name} is not the master (epoch {fence.epoch}); "
                f"the master is {now}; nothing written"
            )
        raise StoreError(f"{self.location}: concurrent write during {what}; nothing written")

    def create(self, config: model.ConfigData) -> None:
        config = model.revalidate(config)
        with self.locked():
            if self.exists():
                raise StoreError(f"{self.location} already exists; refusing to overwrite it")
            self._put(model.encode(config), [etcd.cmp_create(self.key, 0)], "create")

    @contextlib.contextmanager
    def update(self) -> Iterator[model.ConfigData]:
        """Change the document: nothing is written if the block raises or validation fails."""
        with self.locked():
            config, revision = self.load_with_revision()
            config.changing()
            yield config
            config.changing(False)
            config.touch(model.now())
            try:
                checked = model.revalidate(config)
            except ConfigError as err:
                raise ConfigError(f"change refused, nothing written: {err}") from None
            self._put(model.encode(checked), [etcd.cmp_mod(self.key, revision)], "update")

    def replace(self, config: model.ConfigData) -> None:
        """Overwrite the document with `config` (validated); for imports and restores."""
        data = model.encode(model.revalidate(config))
        with self.locked():
            kv = self.client.get(self.key)
            compare = ([etcd.cmp_mod(self.key, kv.mod_revision)] if kv
                       else [etcd.cmp_create(self.key, 0)])
            self._put(data, compare, "replace")
