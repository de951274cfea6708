"""`GET /2/herder/metrics`: masterd's figures in Prometheus text (prometheus-client, as mond,
maintd and noded serve theirs at /metrics): the jobs by status, the queue's drain flag, the
config's serial number, the nodes and instances by state, the process."""

from __future__ import annotations

import asyncio

from aiohttp import web

from herder.core import access, metrics, model
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.rapi.base import ROUTES, config_of, ctx_of


def families(config: model.ConfigData, queue: JobQueue) -> list[metrics.Family]:
    """The figures of one scrape (blocking: the queue is read under its lock)."""
    statuses = [s for job_id in queue.job_ids() if (s := queue.status_of(job_id)) is not None]
    nodes = config.nodes.values()
    return [
        metrics.counts("herder_masterd_jobs", "Jobs in the queue, by status", "status",
                       statuses),
        metrics.Family("herder_masterd_queue_drained", "The queue refuses new jobs (1)",
                       samples=[((), 1.0 if queue.drained else 0.0)]),
        metrics.Family("herder_masterd_config_serial", "The config's serial number",
                       samples=[((), float(config.serial_no))]),
        metrics.counts("herder_masterd_nodes", "Nodes, by role", "role",
                       ("offline" if n.offline else "drained" if n.drained else
                        "master-candidate" if n.master_candidate else "regular"
                        for n in nodes),
                       every=("master-candidate", "regular", "drained", "offline")),
        metrics.counts("herder_masterd_instances", "Instances, by admin state", "admin_state",
                       (i.admin_state for i in config.instances.values()),
                       every=("up", "down", "offline")),
    ]


@ROUTES.allow(access.RAPI_READ)
async def prometheus(request: web.Request) -> web.Response:
    config = config_of(request)
    found = await asyncio.to_thread(families, config, ctx_of(request).queue)
    return web.Response(body=metrics.exposition(found),
                        headers={"Content-Type": metrics.CONTENT_TYPE})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/herder/metrics", prometheus)
