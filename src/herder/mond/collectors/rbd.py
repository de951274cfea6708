"""`rbd`: Ceph RBD storage as this node sees it (category storage, kind 1).

Reads `ceph df --format json` (cluster and pool capacity) and `rbd showmapped --format json`
(the images mapped on this node; the older plain-text and id-keyed JSON layouts parse too).
Sizes are KiB. Per pool: `used` is the data stored (`stored`, or `bytes_used` on Ceph releases
without it), `free` is `max_avail` (what can still be stored, after replication), `total` =
used + free. The top-level free/used/total are the sums over the cluster's RBD pools (the `pool`
disk parameter of the cluster and of its rbd disks; "rbd" by default) when a cluster config is
present, otherwise the cluster-wide raw figures of `ceph df`. Mapped images are matched to
instances by (pool, image name) from the config's rbd disks.

Status: 4 with "unreachable: ..." when `ceph df` fails or hangs (the usual sign that the node
cannot reach the monitors); 4 when a configured pool does not exist; 2 when the mapped images
cannot be listed. Output that is not what Ceph prints raises CollectorError (status 4 naming it).
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

from herder.core import model
from herder.mond.collector import CollectContext, Collector, CollectorError
from herder.mond.report import Kind, Status, merge_statuses, status

KIB = 1024
CEPH_CONNECT_TIMEOUT = 5  # seconds `ceph` waits for the monitors
CEPH_DF_ARGV = ("ceph", "--connect-timeout", str(CEPH_CONNECT_TIMEOUT), "df", "--format", "json")
RBD_SHOWMAPPED_ARGV = ("rbd", "showmapped", "--format", "json")
DEFAULT_POOL = "rbd"
_MAPPED_KEYS = ("id", "pool", "namespace", "image", "snap", "device")


def _kib(value: Any) -> int:
    return int(value) // KIB


def parse_ceph_df(text: str) -> dict[str, Any]:
    """`ceph df --format json` -> {"cluster": {total, free, used}, "pools": [...]} in KiB."""
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise CollectorError(f"ceph df output is not JSON: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("pools", []), list):
        raise CollectorError("ceph df output is not a JSON object with a pools list")
    try:
        stats = doc.get("stats") or {}
        total = int(stats.get("total_bytes", 0))
        free = int(stats.get("total_avail_bytes", 0))
        used = int(stats.get("total_used_raw_bytes", stats.get("total_used_bytes", total - free)))
        pools = []
        for pool in doc.get("pools", []):
            pst = pool.get("stats") or {}
            pool_used = int(pst.get("stored", pst.get("bytes_used", 0)))
            pool_free = int(pst.get("max_avail", 0))
            pools.append({
                "name": str(pool["name"]), "id": pool.get("id"),
                "free": _kib(pool_free), "used": _kib(pool_used),
                "total": _kib(pool_used + pool_free),
                "objects": int(pst.get("objects", 0)),
            })
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CollectorError(f"unexpected ceph df output: {type(err).__name__}: {err}") from None
    return {"cluster": {"total": _kib(total), "free": _kib(free), "used": _kib(used)},
            "pools": pools}


def _mapped(values: dict[str, Any]) -> dict[str, Any]:
    image = values.get("name", values.get("image"))
    if image is None or values.get("device") is None:
        raise CollectorError("rbd showmapped entry without image name or device")
    return {"id": str(values.get("id", "")), "pool": str(values.get("pool", "")),
            "namespace": str(values.get("namespace", "")), "image": str(image),
            "snap": str(values.get("snap", "-")), "device": str(values["device"])}


def parse_showmapped(text: str) -> list[dict[str, Any]]:
    """`rbd showmapped` in any of its layouts: JSON list (current), JSON object keyed by id
    (older), or plain text with or without the `id pool image snap device` header."""
    stripped = text.strip()
    if not stripped:
        return []
    if stripped[0] in "[{":
        try:
            doc = json.loads(stripped)
        except ValueError as err:
            raise CollectorError(f"rbd showmapped output is not JSON: {err}") from None
        if isinstance(doc, dict):
            items = [{"id": key, **value} if isinstance(value, dict) else value
                     for key, value in doc.items()]
        elif isinstance(doc, list):
            items = doc
        else:
            raise CollectorError("rbd showmapped JSON is neither a list nor an object")
        if not all(isinstance(item, dict) for item in items):
            raise CollectorError("rbd showmapped JSON entries must be objects")
        return [_mapped(item) for item in items]
    result = []
    header: list[str] | None = None
    for number, line in enumerate(stripped.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if words[0] == "id":
            header = words
            continue
        columns = header or (["id", "pool", "image", "snap", "device"] if len(words) == 5
                             else ["id", "pool", "namespace", "image", "snap", "device"])
        if len(words) != len(columns) or not words[0].isdigit() or not re.match(
                r"^/dev/", words[-1]):
            raise CollectorError(f"rbd showmapped line {number} is not a mapping: {line[:80]!r}")
        result.append(_mapped(dict(zip(columns, words, strict=True))))
    return result


def rbd_pools(config: model.ConfigData | None) -> list[str]:
    """The pools the cluster's rbd disks use (cluster default and per-disk `pool`)."""
    if config is None:
        return []
    default = config.cluster.diskparams.get("rbd", {}).get("pool", DEFAULT_POOL)
    pools = [default] if "rbd" in config.cluster.enabled_disk_templates else []
    for _inst, disk in _rbd_disks(config):
        pool = disk.params.get("pool", default)
        if pool not in pools:
            pools.append(pool)
    return pools


def _rbd_disks(config: model.ConfigData) -> list[tuple[model.Instance, model.Disk]]:
    return [(inst, disk) for inst in config.instances.values() for disk in inst.disks
            if disk.dev_type == "rbd"]


def image_owners(config: model.ConfigData | None) -> dict[tuple[str, str], str]:
    """(pool, image) -> instance name for the config's rbd disks."""
    owners: dict[tuple[str, str], str] = {}
    if config is None:
        return owners
    default = config.cluster.diskparams.get("rbd", {}).get("pool", DEFAULT_POOL)
    for inst, disk in _rbd_disks(config):
        lid = disk.logical_id
        image = getattr(lid, "name", None) or getattr(lid, "path", None)
        if image:
            owners[(disk.params.get("pool", default), image)] = inst.name
    return owners


def rbd_data(df: dict[str, Any] | None, df_error: str | None,
             mapped: list[dict[str, Any]] | None, mapped_error: str | None,
             pools: list[str], owners: dict[tuple[str, str], str]) -> dict[str, Any]:
    statuses = []
    data: dict[str, Any] = {"free": 0, "used": 0, "total": 0}
    if df is None:
        statuses.append(status(Status.BAD, f"unreachable: {df_error}"))
        data["pools"] = []
        data["cluster"] = None
    else:
        by_name = {p["name"]: p for p in df["pools"]}
        if pools:
            wanted = [by_name[name] for name in pools if name in by_name]
            for name in pools:
                if name not in by_name:
                    statuses.append(status(Status.BAD, f"rbd pool {name} does not exist"))
            for key in ("free", "used", "total"):
                data[key] = sum(p[key] for p in wanted)
        else:
            data.update(df["cluster"])
        data["pools"] = df["pools"]
        data["cluster"] = df["cluster"]
    if mapped is None:
        statuses.append(status(Status.UNKNOWN, f"cannot list mapped images: {mapped_error}"))
        data["mapped"] = []
    else:
        data["mapped"] = [{**m, "instance": owners.get((m["pool"], m["image"]))}
                          for m in mapped]
    return {"status": merge_statuses(statuses), **data}


# what Ceph's tools say when there is no ceph.conf to read (librados' conf_read_file)
NO_CEPH_CONFIG = "conf_read_file"


class RbdCollector(Collector):
    """Storage type `rbd`: Ceph pool capacity and the images mapped on this node."""

    name = "rbd"
    category = "storage"
    kind = Kind.STATUS
    inputs = {"ceph_df": " ".join(CEPH_DF_ARGV), "rbd_showmapped": " ".join(RBD_SHOWMAPPED_ARGV)}

    def available(self) -> bool:
        return (any(name in self.ctx.inputs for name in self.inputs)
                or shutil.which("ceph") is not None or shutil.which("rbd") is not None)

    def collect(self) -> dict[str, Any]:
        ctx: CollectContext = self.ctx
        df: dict[str, Any] | None = None
        df_error: str | None = None
        try:
            df_text = ctx.run(CEPH_DF_ARGV, input_name="ceph_df")
        except CollectorError as err:
            df_error = str(err)
        else:
            df = parse_ceph_df(df_text)
        mapped: list[dict[str, Any]] | None = None
        mapped_error: str | None = None
        try:
            mapped_text = ctx.run(RBD_SHOWMAPPED_ARGV, input_name="rbd_showmapped")
        except CollectorError as err:
            mapped_error = str(err)
        else:
            mapped = parse_showmapped(mapped_text)
        config = ctx.config()
        pools = rbd_pools(config)
        data = rbd_data(df, df_error, mapped, mapped_error, pools, image_owners(config))
        if config is not None and not pools and data["status"]["code"] != Status.OK:
            # Ceph's tools on a node of a cluster that uses no rbd (no rbd template enabled,
            # no rbd disk): a Ceph that cannot be reached is nothing to repair here
            data["status"] = status(Status.OK, "the cluster uses no rbd; "
                                    + data["status"]["message"].replace("\n", "; "))
        elif config is None and df_error is not None and NO_CEPH_CONFIG in df_error:
            # a node without the config (no candidate: mond asks confd, which does not say
            # whether the cluster uses rbd) and without any Ceph configuration: Ceph's tools
            # are installed but this node is in no Ceph cluster; cluster verify is where a node
            # that should reach Ceph and cannot is reported
            data["status"] = status(Status.OK, "no Ceph configuration on this node; "
                                    + data["status"]["message"].replace("\n", "; "))
        return data

    def summary(self, data: Any) -> Any:
        return {key: data[key] for key in ("status", "free", "used", "total") if key in data}


COLLECTORS = [RbdCollector]
