"""The ports herder's daemons listen on, each defined once (Ganeti 3.0's where Ganeti has the
daemon: `ganeti-noded` 1811, `ganeti-confd` 1814, `ganeti-mond` 1815, `ganeti-rapi` 5080).

Standard library only: the allocator (a bare iallocator script) reads mond's port here too.
"""

from __future__ import annotations

NODED = 1811  # node RPC (HTTPS, client certificate of the cluster)
CONFD = 1814  # confd (UDP)
MOND = 1815  # the monitoring agent (HTTP)
MAINTD = 1816  # maintd's status and reads (HTTP)
MAINTD_NOTIFY = 1817  # maintd's HTTPS: instmon's notifications, RAPI writers' cancels
MASTERD = 5080  # masterd's RAPI (HTTPS), Ganeti's RAPI port
