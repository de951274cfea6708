"""The node's cephx key as a libvirt secret, so that a domain's rbd network disks can name it
(`<auth username=...><secret type='ceph' uuid=.../></auth>`) without the key in the domain.

The secret's UUID is derived from the Ceph cluster's fsid and the user, so every node of a
cluster defines the same UUID for the same key: a domain's definition migrates to another node
unchanged, and that node's noded defines the secret before the domain arrives (it assembles the
disks first). The value is set again when it differs (a rotated key); the secret is private
(libvirt never reveals its value through its API) and persistent.
"""

from __future__ import annotations

import base64
import uuid
from xml.sax.saxutils import escape

import libvirt

from herder.noded.bdev.cephclient import CephClient
from herder.noded.hypervisor import Hypervisor

# uuid5 namespace of herder's Ceph secrets (fixed: the same UUID on every node)
SECRET_NAMESPACE = uuid.UUID("4c1e1a52-3b0f-5d7e-9a43-6865726465ff")


def secret_uuid(client: CephClient) -> str:
    return str(uuid.uuid5(SECRET_NAMESPACE, f"ceph:{client.fsid}:{client.entity}"))


def secret_xml(client: CephClient) -> str:
    usage = escape(f"ceph {client.fsid} {client.entity}")
    return (f"<secret ephemeral='no' private='yes'><uuid>{secret_uuid(client)}</uuid>"
            f"<description>herder: cephx key of {escape(client.entity)}</description>"
            f"<usage type='ceph'><name>{usage}</name></usage></secret>")


def ensure(hv: Hypervisor, client: CephClient) -> str:
    """Define the client's secret on the node's libvirtd (or update its value); its UUID."""
    value = base64.b64decode(client.key)
    wanted = secret_uuid(client)

    def define(conn: libvirt.virConnect) -> None:
        try:
            secret = conn.secretLookupByUUIDString(wanted)
        except libvirt.libvirtError as err:
            if err.get_error_code() != libvirt.VIR_ERR_NO_SECRET:
                raise
            secret = conn.secretDefineXML(secret_xml(client))
        secret.setValue(value)  # private secrets cannot be read back: set it every time

    hv.call(define)
    return wanted
