"""Trust on a simulated cluster of three nodes with a real guest (issue 35 items 1 and 7).

Item 7: an open console (serial, VNC) outlived its authority: a write user removed from the
users file kept streaming and typing. Now the console ends within seconds when its user loses
the `write` option or leaves the users file (close code 1008, the reason).

Item 1: a removed node kept root on every node, also after `renew-crypto`: libvirtd's TLS port
accepted any certificate of the cluster CA whose subject was a listed node, and the removed node
holds that CA's key. Now libvirt trusts a CA of its own whose key only the master holds, renewed
when a node is removed and at `renew-crypto`: from the removed node itself, its libvirt
certificate and any certificate it issues with the cluster CA are refused by every libvirtd,
while the remaining nodes still migrate the guest; the node added again is trusted without
touching the other nodes' libvirtd.

The nodes are Debian 12 hosts (`hosts="debian"`, issue 34: systemd, Debian's socket-activated
libvirtd, herder from the wheel; docs/compat.md N5a): the forged certificate is made with the
node's own herder (/opt/herder).
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests import simaddresses
from tests.simhelpers import (
    config,
    herder,
    on,
    reset_node,
    running_sim,
    wait_for,
    where,
)

pytestmark = [pytest.mark.slow, pytest.mark.guests]

NODE1, NODE2, NODE3 = (f"node{i}.sim.herder.test" for i in (1, 2, 3))
DATA = "/var/lib/herder"
PKI = f"{DATA}/libvirt-pki"
GUEST = "guarded1"
HEARTBEAT = "herder-guest boot_id="
CONSOLER = ("consoler", "c0nsole-pass")  # a write user of its own: the tests take it away
ENDS_WITHIN = 15.0  # seconds: the consoles look each second; a loaded machine is slow
BOOT = 300.0  # a TCG guest boots in ~10 s idle; the machine is a loaded 2-core one
NODE_PYTHON = "/opt/herder/current/bin/python"  # the venv a Debian host's wheel made

# A certificate for node1's name issued by the cluster CA (which every node, a removed one too,
# holds), shown to a libvirtd: the client checks nothing of the server (no_verify), so what
# answers is the server's check of this certificate.
FORGE = """
import pathlib, sys
from herder.core import node_certs
ca = pathlib.Path("/var/lib/herder/server.pem").read_bytes()
pem = node_certs.issue(ca, sys.argv[1])
out = pathlib.Path("/tmp/forged-pki")
out.mkdir(exist_ok=True)
key, _, cert = pem.partition(b"-----END PRIVATE KEY-----\\n")
(out / "clientkey.pem").write_bytes(key + b"-----END PRIVATE KEY-----\\n")
(out / "clientcert.pem").write_bytes(cert)
(out / "cacert.pem").write_bytes(node_certs.certificate_pem(ca))
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # 127.0.0.100-103 (xdist worker 0) or 104-107: no other simulated cluster's addresses
    from herder.sim import debroot

    reason = debroot.unsupported()
    if reason:
        pytest.skip(reason)
    running = running_sim(tmp_path_factory.mktemp("trust"), 3, guests="qemu", hosts="debian",
                          first_ip=simaddresses.first_ip("trust_sim"))
    state = next(running)
    try:
        herder(state, "instance", "add", GUEST, "--no-name-check", "-t", "sharedfile",
               "-o", "herder-guest", "--disk", "1G", "-n", NODE1,
               "-H", "vnc_bind_address=127.0.0.1", timeout=600)
        set_consoler(state, "write")
        yield state
    finally:
        running.close()


def set_consoler(sim: Any, options: str | None) -> None:
    """The console user's line in the master's users file: with `options`, or gone."""
    users = sim.host(NODE1).path(f"{DATA}/rapi_users")
    lines = [line for line in users.read_text().splitlines()
             if not line.startswith(CONSOLER[0] + " ")]
    if options is not None:
        lines.append(f"{CONSOLER[0]} {CONSOLER[1]} {options}".strip())
    users.write_text("\n".join(lines) + "\n")


def tls(sim: Any, source: str, target: str, pkipath: str = PKI, extra: str = "") -> str:
    """`virsh uri` over TLS from one node to another's libvirtd: "" when it answers, else
    the refusal."""
    uri = f"qemu+tls://{target}/system?pkipath={pkipath}{extra}"
    done = sim.host(source).run(["virsh", "-c", uri, "uri"], timeout=60)
    return "" if done.returncode == 0 else (done.stderr.strip() or "refused")


async def console_until_cut(sim: Any, kind: str, cut: Any) -> tuple[int | None, str, float]:
    """Open the console as the console user, see it stream, then `cut()` its authority:
    (the close code, its reason, the seconds from the cut to the close)."""
    basic = base64.b64encode(":".join(CONSOLER).encode()).decode()
    url = f"{sim.masterd_url.replace('https', 'wss')}/2/instances/{GUEST}/console/{kind}"
    async with aiohttp.ClientSession() as session, \
            session.ws_connect(url, headers={"Authorization": f"Basic {basic}"}, ssl=False,
                               heartbeat=30) as ws:
        seen = ""
        deadline = time.monotonic() + BOOT
        while HEARTBEAT not in seen if kind == "serial" else not seen.startswith("RFB "):
            message = await ws.receive(timeout=max(1.0, deadline - time.monotonic()))
            assert message.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY), message
            seen += message.data if isinstance(message.data, str) else \
                message.data.decode("latin-1")
        cut()
        cut_at = time.monotonic()
        while True:
            message = await ws.receive(timeout=ENDS_WITHIN + 30)
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                                aiohttp.WSMsgType.CLOSING):
                break
        return ws.close_code, str(message.extra or ""), time.monotonic() - cut_at


def reopened(sim: Any, kind: str) -> int:
    """What the console user gets asking for the stream again (without the upgrade)."""
    import httpx

    with httpx.Client(verify=False, timeout=60) as client:
        return client.get(f"{sim.masterd_url}/2/instances/{GUEST}/console/{kind}",
                          auth=CONSOLER).status_code


def test_a_console_ends_when_its_user_loses_the_write_option(sim: Any) -> None:
    wait_for(lambda: where(sim, GUEST) == [NODE1], 120, f"{GUEST} running on node1")
    code, reason, took = asyncio.run(console_until_cut(
        sim, "serial", lambda: set_consoler(sim, "")))
    assert code == 1008 and "may no longer make changes" in reason, (code, reason)
    assert took < ENDS_WITHIN
    assert reopened(sim, "serial") == 403  # and it does not open again


def test_a_console_ends_when_its_user_is_removed(sim: Any) -> None:
    set_consoler(sim, "write")
    code, reason, took = asyncio.run(console_until_cut(
        sim, "vnc", lambda: set_consoler(sim, None)))
    assert code == 1008 and "no longer in the users file" in reason, (code, reason)
    assert took < ENDS_WITHIN
    assert reopened(sim, "vnc") == 401


def node3_refused_everywhere(sim: Any) -> None:
    """From node3, removed: its own libvirt certificate, and one it issues for node1's name with
    the cluster CA it holds, are refused by every other node's libvirtd."""
    forged = sim.host(NODE3).run([NODE_PYTHON, "-c", FORGE, NODE1], timeout=60)
    assert forged.returncode == 0, forged.stderr
    for target in (NODE1, NODE2):
        assert tls(sim, NODE3, target) != "", target
        assert tls(sim, NODE3, target, "/tmp/forged-pki", "&no_verify=1&no_sanity=1") != "", \
            target


def test_a_removed_node_reaches_no_libvirtd(sim: Any) -> None:
    assert tls(sim, NODE3, NODE2) == ""  # a node of the cluster gets in
    before = config(sim).cluster.libvirt_cas
    herder(sim, "node", "remove", NODE3, timeout=300)
    after = config(sim).cluster.libvirt_cas
    assert len(after) == 1 and after != before  # a new CA, of which node3 has no certificate
    node3_refused_everywhere(sim)
    # the nodes left migrate the guest over TLS as before (their new certificates)
    assert tls(sim, NODE1, NODE2) == "" and tls(sim, NODE2, NODE1) == ""
    herder(sim, "instance", "migrate", GUEST, "--target-node", NODE2, timeout=600)
    assert where(sim, GUEST) == [NODE2]


def test_a_node_added_again_is_trusted_without_touching_the_others(sim: Any) -> None:
    libvirtd = {n: libvirtd_pid(sim, n) for n in (NODE1, NODE2)}
    token = reset_node(sim, NODE3)
    address = next(n.address for n in sim.nodes if n.name == NODE3)
    herder(sim, "node", "add", NODE3, "--ip", address, "--join-token", token, timeout=300)
    wait_for(lambda: tls(sim, NODE3, NODE2) == "" and tls(sim, NODE2, NODE3) == "", 60,
             "node3 and node2 trusting each other's libvirt certificates")
    assert {n: libvirtd_pid(sim, n) for n in (NODE1, NODE2)} == libvirtd  # no restart


def test_renew_crypto_leaves_the_removed_node_nothing(sim: Any) -> None:
    """node3 was removed above and added again; the node removed here is node3 again, its
    files kept: after renew-crypto its old cluster key, CA and libvirt certificate are all
    worthless, and the cluster migrates on."""
    herder(sim, "node", "remove", NODE3, timeout=300)
    before = config(sim).cluster.libvirt_cas
    on(sim, NODE1, "cluster", "renew-crypto", "--yes", timeout=600)
    from herder.sim import cluster

    cluster._write_profile(sim.host(NODE1), sim)  # the operator fetches the new certificate
    after = wait_for(lambda: _libvirt_cas(sim), 120, "masterd with the new secrets")
    assert after != before and len(after) == 1
    node3_refused_everywhere(sim)
    assert tls(sim, NODE1, NODE2) == "" and tls(sim, NODE2, NODE1) == ""
    herder(sim, "instance", "migrate", GUEST, "--target-node", NODE1, timeout=600)
    assert where(sim, GUEST) == [NODE1]


def _libvirt_cas(sim: Any) -> list[str] | None:
    try:
        return list(config(sim).cluster.libvirt_cas)
    except Exception:  # masterd restarting, or still the old certificate
        return None


def libvirtd_pid(sim: Any, node: str) -> str:
    done = sim.host(node).run(["pidof", "libvirtd"], timeout=30)
    assert done.returncode == 0, f"{node}: no libvirtd"
    return done.stdout.strip()

