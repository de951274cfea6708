"""One node RPC as the RPC-order comparison sees it: (procedure, node name, key arguments).

Used on both sides: by `cmdlib_driver.py` on the arguments of Ganeti 3.0.2's own RPC runner
(as they go over the wire, named as in Ganeti's `rpc_defs`) and by the tests on the argument
dicts herder's masterd sends. So it uses the standard library only (Debian's python3 runs it
with Ganeti). A disk is kept as (type, logical id, size, children): what decides which device
a node acts on; the flags that change what a node does are kept by name.
"""

from __future__ import annotations

from typing import Any

# herder's argument names where they differ from Ganeti's rpc_defs
HERDER_NAMES = {
    "blockdev_create": {"disk": "bdev"},
    "blockdev_remove": {"disk": "bdev"},
    "blockdev_grow": {"disk": "cf_bdev"},
    "blockdev_addchildren": {"disk": "bdev"},
    "blockdev_removechildren": {"disk": "bdev"},
    "blockdev_assemble": {"as_primary": "on_primary"},
}
# per procedure: the single-disk argument, the disk-list arguments, the flags compared
SINGLE_DISK = {"blockdev_create": "bdev", "blockdev_remove": "bdev", "blockdev_grow": "cf_bdev",
               "blockdev_assemble": "disk", "blockdev_shutdown": "disk",
               "blockdev_find": "disk", "blockdev_setinfo": "disk",
               "blockdev_addchildren": "bdev", "blockdev_removechildren": "bdev"}
DISK_LISTS = {"blockdev_getmirrorstatus": "disks", "blockdev_open": "disks",
              "blockdev_close": "disks", "drbd_disconnect_net": "disks",
              "drbd_attach_net": "disks", "drbd_wait_sync": "disks",
              "blockdev_addchildren": "ndevs", "blockdev_removechildren": "ndevs"}
FLAGS = {"blockdev_create": ("size", "on_primary"),
         "blockdev_assemble": ("on_primary", "idx"),
         "blockdev_grow": ("amount", "dryrun", "backingstore"),
         "blockdev_open": ("exclusive",),
         "drbd_attach_net": ("multimaster",),
         "blockdev_setinfo": ("info",),
         "file_storage_dir_create": ("file_storage_dir",),
         "file_storage_dir_remove": ("file_storage_dir",),
         "file_storage_dir_rename": ("old_file_storage_dir", "new_file_storage_dir")}
# The node RPCs that act on storage: the ones compared.
STORAGE_PREFIXES = ("blockdev_", "drbd_", "file_storage_dir_", "vg_list")


def disk(data: dict[str, Any]) -> list[Any]:
    return [data["dev_type"], list(data["logical_id"]), data.get("size"),
            [disk(child) for child in data.get("children") or []]]


def summary(procedure: str, node: str, args: dict[str, Any],
            herder: bool = False) -> list[Any]:
    if herder:
        names = HERDER_NAMES.get(procedure, {})
        args = {names.get(key, key): value for key, value in args.items()}
    key: dict[str, Any] = {}
    if procedure in SINGLE_DISK:
        key["disk"] = disk(args[SINGLE_DISK[procedure]])
    if procedure in DISK_LISTS:
        key["disks"] = [disk(d) for d in args[DISK_LISTS[procedure]]]
    if procedure == "blockdev_rename":
        key["devlist"] = [[disk(dev), list(new_id)] for dev, new_id in args["devlist"]]
    for flag in FLAGS.get(procedure, ()):
        key[flag] = args.get(flag)
    return [procedure, node, key]
