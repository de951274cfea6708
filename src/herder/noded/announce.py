"""noded tells the master it is up when it starts (`POST /2/herder/nodes/NAME/announce` on
masterd's RAPI at the master IP of this node's ssconf; `masterd.announce`).

masterd stops asking a node it cannot reach until a back-off has passed (up to a minute,
`core.reachability`); the announcement makes it ask this node, and push it the ssconf, files
and config copy it missed, at once. The body is a call signed for this node with the cluster
key's announce key; the TLS connection checks masterd's certificate against the cluster's and
shows this node's certificate. A node that has not joined, has no master IP in its ssconf, or
is the master itself, announces nothing. A failed announcement is tried again `RETRIES` later
(the master may be starting too), then given up: the back-off finds the node in the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

import httpx

from herder.core import node_certs, ports, purpose_keys, rpcauth, ssconf
from herder.core.errors import HerderError
from herder.noded.trust import NodeTrust

log = logging.getLogger("herder.noded")
METHOD = "node_announce"  # masterd.announce.METHOD
RETRIES = (5.0, 30.0)  # seconds before the second and the third try
TIMEOUT = 10.0


def target(trust: NodeTrust, name: str, port: int = ports.MASTERD) -> str | None:
    """The URL this node announces itself to; None: nothing to announce (not joined, no
    master IP known, or this node is the master)."""
    if not trust.joined():
        return None
    ip = ssconf.master_ip(trust.config_dir)
    if ip is None or ssconf.master_node(trust.config_dir) == name:
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"https://{host}:{port}/2/herder/nodes/{name}/announce"


def announce_once(trust: NodeTrust, name: str, url: str) -> None:
    """One announcement; HerderError with the reason when masterd did not take it."""
    keys = trust.keys()
    if not keys:
        raise HerderError("the node has no cluster key")
    body = rpcauth.sign_call(keys[0], METHOD, name, {}, purpose=purpose_keys.NODE_ANNOUNCE)
    context = ssl.create_default_context(cafile=str(trust.secrets.certificate))
    context.check_hostname = False  # the cluster certificate names the cluster
    shown = node_certs.node_certificate_beside(trust.secrets.certificate)
    with contextlib.suppress(OSError, ssl.SSLError):  # none yet: the server does not ask
        context.load_cert_chain(shown)
    try:
        with httpx.Client(verify=context, timeout=TIMEOUT) as http:
            answer = http.post(url, content=body)
    except (httpx.HTTPError, OSError, ssl.SSLError) as err:
        raise HerderError(f"cannot reach masterd at {url}: {err}") from None
    if answer.status_code != 200:
        raise HerderError(f"masterd refused the announcement ({answer.status_code}): "
                          f"{answer.text.strip()[:200]}")


async def announce(trust: NodeTrust, name: str, stop: asyncio.Event,
                   port: int = ports.MASTERD) -> None:
    """noded's task: announce this node once it serves (tried again `RETRIES` later)."""
    url = target(trust, name, port)
    if url is None:
        return
    for delay in (0.0, *RETRIES):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
        if stop.is_set():
            return
        try:
            await asyncio.to_thread(announce_once, trust, name, url)
        except (HerderError, ValueError, OSError) as err:
            log.info("announcing this node to the master: %s", err)
            continue
        log.info("announced this node to the master (%s)", url)
        return
