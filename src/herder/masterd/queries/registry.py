"""Ganeti's query resources, by the name `/2/query/NAME` takes (Ganeti's QR_VIA_RAPI)."""

from __future__ import annotations

from herder.masterd.queries import export, group, instance, job, jobfilter, lock, network, node
from herder.masterd.queries.fields import Resource

RESOURCES: dict[str, Resource] = {module.RESOURCE.name: module.RESOURCE for module in (
    node, instance, group, job, export, network, jobfilter, lock)}
