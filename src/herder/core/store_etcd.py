"""The config store in etcd: `EtcdStore`, the same `ConfigStore` interface as `FileStore`.

Switching is one setting: a config location `etcds://HOST:PORT[,HOST:PORT...]/CLUSTER` (in
`--config` or `HERDER_CONFIG`) opens an `EtcdStore` (see `herder.core.store.open_store`), over
HTTPS with a client certificate and etcd's authentication, as the client settings file says
(`herder.core.etcd_settings`); `etcd://` is the same over plain HTTP without authentication, for
tests on loopback only. Any other location is a file, as before. Secrets (the HMAC key,
certificates) are not in etcd: they stay in the local directory (`directory`, default
/var/lib/herder).

Layout (far below etcd's default limits at 10,000 instances: 1.5 MiB a request, 128 operations
a transaction): the head `/herder/<CLUSTER>/config` holds the document's own fields, the cluster
and maintenance sections and the current generation; every node group, node, instance and
network is its own key `/herder/<CLUSTER>/objects/<generation>/<table>/<UUID>`. A change is one
transaction: the head and the objects it touched (`core.configdiff`). An import, a restore or a
change too big for one transaction writes every object under a new generation in bounded
batches (invisible until then) and switches the head to it in one transaction; a crash before
the switch leaves the old state. Readers take the head and the objects at the head's revision.
A head holding a whole document (herder before the objects layout) is read as such; the next
write moves it to objects.

A change is made in three layers:
- **lock**: writers serialize on `/herder/<CLUSTER>/lock`, created if absent and attached to a
  short lease of the writing process (`_WriterLease`: kept for its next writes, so a writer that
  dies frees the lock within `lock_ttl` seconds); the transaction that takes it also reads the
  head, and the write's own transaction deletes it (if still its own); waiting writers retry
  with a small jittered backoff. A one-object change is two round trips: take the lock and
  read the head, write and release;
- **compare-and-swap**: the write is a transaction that compares the head's mod_revision with
  the one read, so even a writer whose lock expired cannot overwrite a newer document — that write
  fails with "concurrent write" and nothing is written;
- **fence** (optional, a `herder.core.fence.Fence` or what holds one, masterd's `MasterLease`):
  the same transaction also compares the master key's value and create_revision with the
  writer's node and epoch, so an old master's write is refused by etcd itself ("not the
  master"), however late it arrives.

A transaction whose reply was lost (a member died) may have been applied: the store then reads
the head back and counts it as written only if it holds exactly the bytes it sent (its serial and
time make it unique), so a write is never lost or applied twice.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from herder.core import configdiff, etcd, etcd_settings, model, randomness, upgrade
from herder.core.errors import ConfigError, StoreError
from herder.core.fence import Fence, FenceSource, master_key, resolve_fence
from herder.core.locations import ETCD_SCHEMES, is_etcd_location

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
        fence: Fence | FenceSource | None = None,
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
        self.objects_root = f"/herder/{cluster}/objects/"
        self._cached: _EtcdState | None = None
        # held from a write's commit until the cache holds its state, and by a reader that
        # reloads: a reader that sees the head move waits for this process's writer instead
        # of reading the whole document again (and readers never reload it twice at once)
        self._state_lock = threading.RLock()
        self._writers = threading.Lock()
        self._lease = _WriterLease(client, lock_ttl)

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

    def _objects_prefix(self, generation: str) -> str:
        return f"{self.objects_root}{generation}/"

    def _document(self, head: etcd.KeyValue, revision: int) -> bytes:
        """The whole document of `head` (read at `revision`): a head of the objects layout
        with its objects gathered, page by page at that one revision; an old single-key
        document as it is."""
        layout = _head(head.value)
        if layout is None:
            return head.value
        prefix = self._objects_prefix(layout.generation)
        tables: dict[str, dict[str, msgspec.Raw]] = {name: {} for name in configdiff.TABLES}
        start = prefix.encode()
        end = etcd.prefix_end(start)
        while True:
            page = self.client.range(start, range_end=end, limit=PAGE_KEYS, revision=revision)
            for kv in page.kvs:
                table, _, uuid = kv.key.decode()[len(prefix):].partition("/")
                if table in tables:
                    tables[table][uuid] = msgspec.Raw(kv.value)
            if len(page.kvs) < PAGE_KEYS:
                break
            start = page.kvs[-1].key + b"\0"
        return _ENCODER.encode({**layout.document, **tables})

    def _load_state(self) -> _EtcdState:
        for _ in range(5):
            found = self.client.range(self.key)
            head = found.first
            if head is None:
                self._read()  # says there is none
            assert head is not None
            try:
                raw = self._document(head, found.revision)
            except etcd.EtcdError as err:
                if "compacted" in str(err):  # the revision went meanwhile: read again
                    continue
                raise
            config = self._decode(raw)
            return _EtcdState(head.mod_revision, head.value, config,
                              configdiff.Encoded.of(config), _head(head.value))
        raise StoreError(f"{self.location}: the config kept changing while being read")

    def load(self) -> model.ConfigData:
        return self._load_state().config

    def load_with_revision(self) -> tuple[model.ConfigData, int]:
        state = self._load_state()
        return state.config, state.revision

    def snapshot(self) -> model.ConfigData:
        """The current document, shared by this process's readers (read again only when the
        head's revision moved; this process's own writes keep it current): read it, never
        change it."""
        return self._state().config

    def recent_snapshot(self) -> model.ConfigData:
        """The shared document as this process last read or wrote it (its own writes are in
        it at once), without reading the head: another process's write shows once any reader
        of this process reads the head again."""
        state = self._cached
        return state.config if state is not None else self.snapshot()

    def snapshot_at(self, head: etcd.KeyValue) -> model.ConfigData:
        """`snapshot()` for a caller that has just read the head itself (saves reading it
        again)."""
        return self._state(head).config

    def _state(self, head: etcd.KeyValue | None = None) -> _EtcdState:
        """The shared state as of `head` (read now when not given)."""
        if head is None:
            head = self._read()
        state = self._cached
        if state is None or state.revision != head.mod_revision:
            with self._state_lock:
                state = self._cached
                if state is None or state.revision < head.mod_revision:
                    state = self._follow(state, head) if state is not None else None
                    if state is None:
                        state = self._load_state()
                    self._cached = state
        return state

    def _follow(self, state: _EtcdState, head: etcd.KeyValue) -> _EtcdState | None:
        """`state` brought to `head` by what changed since (another process's writes): the
        objects modified after its revision, the keys gone, the head's fields and sections,
        applied as one change set (only those objects decoded). None when it cannot be (a
        new generation, an old single-key head, a revision compacted away)."""
        layout = _head(head.value)
        if layout is None or state.layout is None or layout.generation != state.layout.generation:
            return None
        prefix = self._objects_prefix(layout.generation)
        start, end = prefix.encode(), etcd.prefix_end(prefix.encode())
        revision = head.mod_revision
        change = configdiff.ChangeSet()
        try:
            while True:
                page = self.client.range(start, range_end=end, limit=PAGE_KEYS,
                                         revision=revision,
                                         min_mod_revision=state.revision + 1)
                for kv in page.kvs:
                    table, _, uuid = kv.key.decode()[len(prefix):].partition("/")
                    if table in configdiff.TABLES:
                        change.puts.setdefault(table, {})[uuid] = kv.value
                if len(page.kvs) < PAGE_KEYS:
                    break
                start = page.kvs[-1].key + b"\0"
            count = self.client.range(prefix.encode(), range_end=end, revision=revision,
                                      count_only=True).count
            known = sum(len(getattr(state.config, name)) for name in configdiff.TABLES)
            added = sum(1 for name, puts in change.puts.items()
                        for uuid in puts if uuid not in getattr(state.config, name))
            if count != known + added:  # objects were deleted: find which
                present = self._keys(prefix, end, revision)
                for name in configdiff.TABLES:
                    gone = [u for u in getattr(state.config, name) if (name, u) not in present]
                    if gone:
                        change.deletes[name] = gone
        except etcd.EtcdError as err:
            if "compacted" in str(err):
                return None
            raise
        document = layout.document
        change.top = {name: document[name] for name in configdiff.TOP_FIELDS
                      if name in document}
        for name in configdiff.SECTIONS:
            if name not in document:  # a document written before the section existed
                continue
            raw = _ENCODER.encode(document.get(name))
            if raw != state.encoded.sections.get(name):
                change.sections[name] = raw
        try:
            config = configdiff.apply(state.config, change)
        except ConfigError as err:
            raise ConfigError(f"{self.location}: {err}") from None
        return _EtcdState(revision, head.value, config, configdiff.Encoded.of(config), layout)

    def _keys(self, prefix: str, end: bytes, revision: int) -> set[tuple[str, str]]:
        """(table, UUID) of every object key under `prefix` at `revision`."""
        found: set[tuple[str, str]] = set()
        start = prefix.encode()
        while True:
            page = self.client.range(start, range_end=end, limit=PAGE_KEYS * 20,
                                     revision=revision, keys_only=True)
            for kv in page.kvs:
                table, _, uuid = kv.key.decode()[len(prefix):].partition("/")
                found.add((table, uuid))
            if len(page.kvs) < PAGE_KEYS * 20:
                return found
            start = page.kvs[-1].key + b"\0"

    # --- writing --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the writers' lock key (waits for other processes' writers, up to `lock_wait`
        seconds; this process's writers queue in turn first, so a hundred jobs of one masterd
        do not spend their wait on each other)."""
        with self._hold():
            yield

    @contextlib.contextmanager
    def _hold(self) -> Iterator[_Hold]:
        """The writers' lock, held: one transaction takes the key and reads the head. The
        write that ends the hold releases the key in its own transaction (`_commit`); a hold
        that writes nothing (or whose write fails) releases it on its own."""
        with self._writers:
            hold = self._take_lock()
            try:
                yield hold
            finally:
                if not hold.released:
                    self._release(hold)

    def _take_lock(self) -> _Hold:
        deadline = time.monotonic() + self.lock_wait
        delay = 0.005
        while True:
            lease_id = self._lease.for_hold()
            token = f"{os.getpid()}-{lease_id:x}"
            try:
                result = self.client.txn(
                    [etcd.cmp_create(self.lock_key, 0)],
                    [etcd.op_put(self.lock_key, token, lease_id), etcd.op_range(self.key)],
                    [etcd.op_range(self.lock_key), etcd.op_range(self.key)],
                )
            except etcd.EtcdError as err:
                if _LEASE_GONE not in str(err):
                    raise
                self._lease.forget(lease_id)  # expired in etcd meanwhile: a new one
                continue
            head = result.ranges[-1].first if result.ranges else None
            kv = result.ranges[0].first if not result.succeeded and result.ranges else None
            # taken; or held by this very token: a retried transaction that had won
            if result.succeeded or (kv is not None and kv.value.decode() == token):
                self._lease.holding(True)
                return _Hold(token, head)
            if time.monotonic() >= deadline:
                holder = kv.value.decode() if kv else "?"
                raise StoreError(
                    f"{self.location}: another writer ({holder}) holds the config lock "
                    f"for more than {self.lock_wait:g} s"
                )
            time.sleep(randomness.spread(delay))
            delay = min(delay * 2, 0.1)

    def _release(self, hold: _Hold) -> None:
        """Delete the lock key if it is still this hold's (its lease ends it otherwise: when
        this fails the lease is given up, so it expires within `lock_ttl`)."""
        self._lease.holding(False)
        try:
            self.client.txn([etcd.cmp_value(self.lock_key, hold.token)],
                            [etcd.op_delete(self.lock_key)])
        except etcd.EtcdError:
            self._lease.forget(None)
        hold.released = True

    def _fence(self) -> Fence | None:
        return resolve_fence(self.fence, self.location)

    def _commit(self, head: bytes, ops: list[dict[str, object]],
                compare: list[dict[str, object]], what: str, hold: _Hold | None) -> int:
        """One transaction: the head and `ops` if `compare` (and the fence) hold, and the
        release of `hold`'s lock key (if it is still its own); the head's new revision. A
        refusal is explained; a lost reply whose transaction was applied (the head holds
        exactly our bytes) counts as written."""
        fence = self._fence()
        checks = list(compare)
        if fence is not None:
            checks += [
                etcd.cmp_value(self.master_key, fence.node_name),
                etcd.cmp_create(self.master_key, fence.epoch),
            ]
        try:
            result = self.client.txn(checks, [etcd.op_put(self.key, head), *ops, *(
                [_release_op(self.lock_key, hold.token)] if hold is not None else [])],
                                     [etcd.op_range(self.key), etcd.op_range(self.master_key)])
        except etcd.EtcdError as err:
            raise StoreError(f"{self.location}: {what} failed, maybe not written: {err}") from None
        current = None if result.succeeded else result.ranges[0].first if result.ranges else None
        if result.succeeded or (current is not None and current.value == head):
            if hold is not None:  # released with it
                self._lease.holding(False)
                hold.released = True
            # (or: our own write, applied before its reply was lost)
            return result.revision if current is None else current.mod_revision
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

    def _write_generation(self, config: model.ConfigData, compare: list[dict[str, object]],
                          old: _Head | None, what: str) -> _EtcdState:
        """Write every object under a new generation (batches of bounded transactions, not
        visible yet), then switch the head to it in one transaction; then drop the old one
        (still holding the lock: another writer's generation in the making is no old one).
        A crash before the switch leaves the old state (and unused keys, dropped by the next
        generation write)."""
        generation = os.urandom(8).hex()
        prefix = self._objects_prefix(generation)
        encoded = configdiff.Encoded.of(config)
        batch: list[dict[str, object]] = []
        size = 0
        for name, table in encoded.tables.items():
            for uuid, raw in table.items():
                if len(batch) >= MAX_TXN_OPS - 1 or size + len(raw) > MAX_TXN_BYTES:
                    self._put_batch(batch, what)
                    batch, size = [], 0
                batch.append(etcd.op_put(f"{prefix}{name}/{uuid}", raw))
                size += len(raw) + 100
        if batch:
            self._put_batch(batch, what)
        head = _head_value(generation, config, encoded)
        revision = self._commit(head, [], compare, what, None)
        with contextlib.suppress(etcd.EtcdError):  # unused generations (also of dead writers)
            for stale in self._generations() - {generation}:
                self.client.delete(self._objects_prefix(stale), prefix=True)
        return _EtcdState(revision, head, config, encoded, _head(head))

    def _generations(self) -> set[str]:
        found = set()
        start = self.objects_root.encode()
        end = etcd.prefix_end(start)
        while start < end:
            page = self.client.range(start, range_end=end, limit=1)
            if not page.kvs:
                break
            generation = page.kvs[0].key.decode()[len(self.objects_root):].split("/", 1)[0]
            found.add(generation)
            start = etcd.prefix_end(self._objects_prefix(generation).encode())
        return found

    def _put_batch(self, batch: list[dict[str, object]], what: str) -> None:
        try:
            self.client.txn([], batch)
        except etcd.EtcdError as err:
            raise StoreError(f"{self.location}: {what} failed, nothing written: {err}") from None

    def create(self, config: model.ConfigData) -> None:
        config = model.revalidate(config)
        with self._hold() as hold:
            if hold.head is not None:
                raise StoreError(f"{self.location} already exists; refusing to overwrite it")
            self._cached = self._write_generation(config, [etcd.cmp_create(self.key, 0)], None,
                                                  "create")

    @contextlib.contextmanager
    def update(self) -> Iterator[model.ConfigData]:
        """Change the document: nothing is written if the block raises or validation fails.
        One transaction writes the head and the objects that changed (a change too big for
        one transaction writes a new generation of every object)."""
        with self._hold() as hold:
            state = self._state(hold.head)
            current = state.config
            config, started = configdiff.begin_change(current, state.encoded)
            yield config
            change = configdiff.end_change(config, current, state.encoded, started)
            with self._state_lock:
                new_state = self._apply(state, config, change, hold)
                index = current.__dict__.get("_index")
                if index is not None:
                    current.__dict__.pop("_index", None)
                    config.keep_index(configdiff.follow(index[1], config, change))
                self._cached = new_state

    def _apply(self, state: _EtcdState, config: model.ConfigData,
               change: configdiff.ChangeSet, hold: _Hold) -> _EtcdState:
        compare = [etcd.cmp_mod(self.key, state.revision)]
        ops = change.touched()
        size = sum(len(raw) for puts in change.puts.values() for raw in puts.values())
        # the head, the objects and the lock's release in one transaction
        if state.layout is None or ops + 2 > MAX_TXN_OPS or size > MAX_TXN_BYTES:
            return self._write_generation(config, compare, state.layout, "update")
        prefix = self._objects_prefix(state.layout.generation)
        encoded = configdiff.Encoded.of(config)
        writes: list[dict[str, object]] = [
            etcd.op_put(f"{prefix}{name}/{uuid}", raw)
            for name, puts in change.puts.items() for uuid, raw in puts.items()]
        writes += [etcd.op_delete(f"{prefix}{name}/{uuid}")
                   for name, gone in change.deletes.items() for uuid in gone]
        head = _head_value(state.layout.generation, config, encoded)
        revision = self._commit(head, writes, compare, "update", hold)
        return _EtcdState(revision, head, config, encoded, _head(head))

    def replace(self, config: model.ConfigData) -> None:
        """Overwrite the document with `config` (validated); for imports and restores."""
        config = model.revalidate(config)
        with self._hold() as hold:
            kv = hold.head
            compare = ([etcd.cmp_mod(self.key, kv.mod_revision)] if kv
                       else [etcd.cmp_create(self.key, 0)])
            self._cached = self._write_generation(config, compare,
                                                  _head(kv.value) if kv else None, "replace")


# etcd's defaults: 128 operations per transaction (--max-txn-ops), requests up to 1.5 MiB
# (--max-request-bytes); herder stays well inside both
MAX_TXN_OPS = 100
MAX_TXN_BYTES = 512 * 1024
PAGE_KEYS = 500  # objects per range read (a page stays far below the reply limits)
_ENCODER = msgspec.json.Encoder(order="sorted")


class _Head(msgspec.Struct, forbid_unknown_fields=True):
    """The head key of the objects layout: where the objects are, and the document's own
    fields and sections."""

    layout: int
    generation: str
    document: dict[str, Any]


_HEAD = msgspec.json.Decoder(_Head)


def _head(raw: bytes) -> _Head | None:
    """The head of the objects layout, or None for an old single-key document."""
    if b'"layout"' not in raw[:200]:
        return None
    try:
        return _HEAD.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _head_value(generation: str, config: model.ConfigData,
                encoded: configdiff.Encoded) -> bytes:
    document: dict[str, Any] = dict(configdiff.top_fields(config))
    document.update({name: msgspec.Raw(raw) for name, raw in encoded.sections.items()})
    # layout first: a reader tells the layout from the value's first bytes
    return b'{"layout":2,' + _ENCODER.encode(
        {"document": document, "generation": generation})[1:]


_LEASE_GONE = "requested lease not found"  # etcd's refusal of a put on an expired lease


def _release_op(lock_key: str, token: str) -> dict[str, Any]:
    """Delete the lock key if it still holds `token` (a nested transaction: part of a write's
    own transaction, whose outcome it does not change)."""
    return {"request_txn": {"compare": [etcd.cmp_value(lock_key, token)],
                            "success": [etcd.op_delete(lock_key)]}}


class _Hold:
    """The writers' lock as taken: its token (this process's lease) and the head read in the
    same transaction (None: there is no config yet)."""

    def __init__(self, token: str, head: etcd.KeyValue | None) -> None:
        self.token = token
        self.head = head
        self.released = False


class _WriterLease:
    """The etcd lease a store's lock key is attached to, so a writer that dies frees the lock
    within `ttl` seconds: granted by the first write and kept for the next ones (a write costs
    no lease of its own: a grant and a revoke were two of its round trips), renewed in the
    background every ttl/4 seconds, given up after `IDLE` seconds without a write.

    A hold that lasts longer than ttl/3 is no longer renewed for: the lock then ends within
    about `ttl` of being taken, as when each write had its own lease (the compare-and-swap on
    the head, not the lock, is what keeps a late write out). A hold is taken only on a lease
    still valid for at least half its TTL (renewed, or granted anew, first when not)."""

    IDLE = 60.0

    def __init__(self, client: etcd.EtcdClient, ttl: int) -> None:
        self.client = client
        self.ttl = ttl
        self._lock = threading.Lock()
        self._id: int | None = None
        self._valid_until = 0.0  # monotonic; etcd counts the TTL from later than we do
        self._held_since: float | None = None
        self._used = 0.0
        self._thread: threading.Thread | None = None

    def for_hold(self) -> int:
        """The lease a lock taken now hangs on."""
        with self._lock:
            lease_id, valid_until = self._id, self._valid_until
        if lease_id is not None and valid_until - time.monotonic() < self.ttl / 2:
            self._renew(lease_id)
            with self._lock:
                lease_id = self._id
        if lease_id is None:
            sent = time.monotonic()
            lease = self.client.lease_grant(self.ttl)
            with self._lock:
                self._id, self._valid_until = lease.id, sent + lease.ttl
                lease_id = lease.id
        with self._lock:
            self._used = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._keep, daemon=True,
                                                name="etcd-writer-lease")
                self._thread.start()
        return lease_id

    def holding(self, held: bool) -> None:
        with self._lock:
            self._held_since = time.monotonic() if held else None
            self._used = time.monotonic()

    def forget(self, lease_id: int | None) -> None:
        """Stop using the lease (`lease_id`, or whichever: it is gone, or its lock key may be
        left behind, which its expiry then removes)."""
        with self._lock:
            if lease_id is None or self._id == lease_id:
                self._id = None

    def _renew(self, lease_id: int) -> None:
        sent = time.monotonic()
        try:
            renewed = self.client.lease_keepalive(lease_id)
        except (etcd.EtcdError, RuntimeError):  # (RuntimeError: the client was closed)
            self.forget(lease_id)  # a writer grants a new one
            return
        with self._lock:
            if self._id == lease_id:
                if renewed.ttl <= 0:
                    self._id = None
                else:
                    self._valid_until = sent + renewed.ttl

    def _keep(self) -> None:
        while True:
            time.sleep(self.ttl / 4)
            with self._lock:
                lease_id, now = self._id, time.monotonic()
                idle = self._held_since is None and now - self._used > self.IDLE
                if lease_id is None or idle:
                    self._id, self._thread = None, None
                    break
                if self._held_since is not None and now - self._held_since > self.ttl / 3:
                    continue  # a long hold: its lock ends with the lease
            self._renew(lease_id)
        if lease_id is not None:
            with contextlib.suppress(etcd.EtcdError, RuntimeError):
                self.client.lease_revoke(lease_id)


class _EtcdState:
    """One process's view of the store: the head's revision and the shared config."""

    def __init__(self, revision: int, head: bytes, config: model.ConfigData,
                 encoded: configdiff.Encoded, layout: _Head | None) -> None:
        self.revision = revision
        self.head = head
        self.config = config
        self.encoded = encoded
        self.layout = layout
