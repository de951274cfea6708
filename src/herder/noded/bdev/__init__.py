"""The node's block devices (docs/real-nodes.md §2): Ganeti's block-device layer.

- `base`: the `BlockDev` interface, `BlockDevStatus`, the `Runner` every command goes through and
  the `Host` (this node's commands, files, device nodes and storage paths).
- the disks themselves are Ganeti 3.0's disk objects as its RPCs send them
  (`herder.core.diskobjects.Disk`, decoded once at noded's door).
- `registry`: `dev_type` -> device class; one module per type: `plain`, `drbd` (with
  `drbd_commands`), `file` (and `sharedfile`), `blockdev`, `ext`, `rbd`, `gluster`, `diskless`.
- `operations`: what each node RPC does (`blockdev_create`, `blockdev_remove`, ...,
  `drbd_attach_net`), walking the disk tree as Ganeti's backend does.
"""
