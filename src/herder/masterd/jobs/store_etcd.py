"""The job queue in etcd: `EtcdJobStorage`, the `JobStorage` of a masterd on the etcd backend.

Keys (beside the config document, `/herder/<cluster>/config`):
- `/herder/<cluster>/jobs/<id>`: one per job, the job encoded as the file queue's
  `job-<id>.json` would be;
- `/herder/<cluster>/job_serial`: the highest job id ever handed out, advanced by a
  compare-and-swap transaction (compare its mod_revision) that also writes the new job, so no id
  is used twice, even by two masters one after the other, and a submitted job is one round
  trip;
- `/herder/<cluster>/archive/<id>`: an archived job, moved there from `jobs/` (put and delete
  in one transaction): never read when a master takes the queue over, read by id;
- `/herder/<cluster>/queue_drained`: present while the queue is drained.

Every write is **fenced** by the master lease (a `herder.masterd.lease.MasterLease` or a
`herder.core.fence.Fence`): the same transaction compares the master key's value and
create_revision with the writer's node and epoch, so an old master cannot write a job (or take
an id) once another one was elected, however late its write arrives; it gets a `StoreError`
"not the master" and nothing is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import msgspec

from herder.core import etcd, randomness, untrusted
from herder.core.errors import StoreError
from herder.core.fence import Fence, FenceSource, master_key, resolve_fence
from herder.masterd.jobs.job import Job

log = logging.getLogger("herder.jobs")

ARCHIVE_TXN_JOBS = 60  # jobs archived per transaction: 2 operations each


class EtcdJobStorage:
    """Jobs under `/herder/<cluster>/jobs/`, fenced by the master lease."""

    def __init__(self, client: etcd.EtcdClient, cluster: str, *,
                 fence: Fence | FenceSource | None = None) -> None:
        self.client = client
        self.cluster = cluster
        self.fence = fence
        self.prefix = f"/herder/{cluster}/jobs/"
        self.archive_prefix = f"/herder/{cluster}/archive/"
        self.serial_key = f"/herder/{cluster}/job_serial"
        self.drain_key = f"/herder/{cluster}/queue_drained"
        self.master_key = master_key(cluster)
        # the job serial as last seen: (value, mod_revision; 0: no key), for `add`'s compare
        self._serial: tuple[int, int] = (0, 0)

    def __repr__(self) -> str:
        return f"EtcdJobStorage({self.client.endpoints!r}, {self.cluster!r})"

    def key(self, job_id: int) -> str:
        return f"{self.prefix}{job_id}"

    def _fence(self) -> Fence | None:
        return resolve_fence(self.fence, f"job storage {self.cluster}")

    def _checks(self, fence: Fence | None) -> list[dict[str, object]]:
        if fence is None:
            return []
        return [etcd.cmp_value(self.master_key, fence.node_name),
                etcd.cmp_create(self.master_key, fence.epoch)]

    def _refused(self, fence: Fence | None, result: etcd.TxnResult) -> StoreError | None:
        """The "not the master" error when the fence is what failed, else None."""
        if fence is None:
            return None
        master = result.ranges[-1].first if result.ranges else None
        if (master is not None and master.value.decode() == fence.node_name
                and master.create_revision == fence.epoch):
            return None
        now = f"{master.value.decode()} (epoch {master.create_revision})" if master else "nobody"
        return StoreError(f"{fence.node_name} is not the master (epoch {fence.epoch}); the "
                          f"master is {now}; job not written")

    # --- JobStorage -----------------------------------------------------------------------------

    def load(self) -> tuple[list[Job], int]:
        decoder = msgspec.json.Decoder(Job)
        jobs: list[Job] = []
        highest = 0
        for kv in self.client.range(self.prefix, prefix=True).kvs:
            name = kv.key.decode()[len(self.prefix):]
            try:
                untrusted.check(kv.value, what="job")
                job = decoder.decode(kv.value)
            except (ValueError, msgspec.DecodeError, msgspec.ValidationError) as err:
                log.error("unreadable job %s in etcd (%s); ignored", kv.key.decode(), err)
                if name.isdigit():
                    highest = max(highest, int(name))
                continue
            highest = max(highest, job.id)
            jobs.append(job)
        serial = self.client.get(self.serial_key)
        self._serial = (_serial_of(serial), serial.mod_revision if serial is not None else 0)
        highest = max(highest, self._serial[0])
        jobs.sort(key=lambda job: job.id)
        return jobs, highest

    def save(self, job: Job) -> None:
        self._fenced([etcd.op_put(self.key(job.id), msgspec.json.encode(job))],
                     f"job {job.id}")

    def _fenced(self, ops: list[dict[str, object]], what: str) -> None:
        """Write `ops` in one transaction fenced by the master lease."""
        fence = self._fence()
        try:
            result = self.client.txn(self._checks(fence), ops, [etcd.op_range(self.master_key)])
        except etcd.EtcdError as err:
            raise StoreError(f"{what}: write to etcd failed: {err}") from None
        if not result.succeeded:
            raise self._refused(fence, result) or StoreError(f"{what}: not written")

    # --- the archive and the drain flag ---------------------------------------------------------

    def archive(self, jobs: Iterable[Job]) -> None:
        """Each job's key moved to the archive: put and delete in one fenced transaction
        per ARCHIVE_TXN_JOBS jobs (within etcd's default of 128 operations a transaction)."""
        batch = list(jobs)
        for start in range(0, len(batch), ARCHIVE_TXN_JOBS):
            part = batch[start:start + ARCHIVE_TXN_JOBS]
            ops = []
            for job in part:
                ops += [etcd.op_put(self.archive_prefix + str(job.id), msgspec.json.encode(job)),
                        etcd.op_delete(self.key(job.id))]
            self._fenced(ops, f"archiving job(s) {part[0].id}-{part[-1].id}")

    def load_archived(self, job_id: int) -> Job | None:
        kv = self.client.get(self.archive_prefix + str(job_id))
        if kv is None:
            return None
        try:
            untrusted.check(kv.value, what="job")
            return msgspec.json.decode(kv.value, type=Job)
        except (ValueError, msgspec.DecodeError, msgspec.ValidationError) as err:
            log.error("unreadable archived job %s in etcd (%s)", job_id, err)
            return None

    def archived_ids(self) -> list[int]:
        found = self.client.range(self.archive_prefix, prefix=True, keys_only=True)
        names = (kv.key.decode()[len(self.archive_prefix):] for kv in found.kvs)
        return sorted(int(name) for name in names if name.isdigit())

    def drained(self) -> bool:
        return self.client.get(self.drain_key) is not None

    def set_drained(self, drained: bool) -> None:
        op = etcd.op_put(self.drain_key, "1") if drained else etcd.op_delete(self.drain_key)
        self._fenced([op], "the queue's drain flag")

    def add(self, candidate: int, make: Callable[[int], Job]) -> Job:
        """A new job, `make(id)`, under the next id after the stored serial (and at least
        `candidate`): the serial and the job in one fenced transaction that compares the
        serial's mod_revision with the one this storage saw last (its own last write, or what
        `load` read), so submitting costs one round trip; when another writer moved it, the
        refusal carries the serial as it is and the job is made again with the next id."""
        delay = 0.0
        for _ in range(100):
            fence = self._fence()
            current, revision = self._serial
            job = make(max(current + 1, candidate))
            raw = msgspec.json.encode(job)
            compare = ([etcd.cmp_mod(self.serial_key, revision)] if revision
                       else [etcd.cmp_create(self.serial_key, 0)])
            try:
                result = self.client.txn(
                    compare + self._checks(fence),
                    [etcd.op_put(self.serial_key, str(job.id)),
                     etcd.op_put(self.key(job.id), raw)],
                    [etcd.op_range(self.serial_key), etcd.op_range(self.key(job.id)),
                     etcd.op_range(self.master_key)])
            except etcd.EtcdError as err:
                raise StoreError(f"job {job.id}: write to etcd failed: {err}") from None
            if result.succeeded:
                self._serial = (job.id, result.revision)
                return job
            refused = self._refused(fence, result)
            if refused is not None:
                raise refused
            now, stored = (result.ranges[0].first, result.ranges[1].first) if \
                len(result.ranges) > 1 else (None, None)
            self._serial = (_serial_of(now), now.mod_revision if now is not None else 0)
            if stored is not None and stored.value == raw:
                # our own transaction, applied before its reply was lost (its job holds our
                # bytes, received time and all)
                return job
            if delay:  # the serial moved while we looked: another writer is taking ids
                time.sleep(randomness.spread(delay))
            delay = min(max(delay * 2, 0.005), 0.1)
        raise StoreError("cannot take a job id in etcd: too many concurrent writers")


def _serial_of(kv: etcd.KeyValue | None) -> int:
    return int(kv.value) if kv is not None and kv.value.isdigit() else 0
