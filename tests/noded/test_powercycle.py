"""noded's power cycle never reboots a machine it does not own: in the machine's initial PID
namespace only a noded systemd started as a service may reboot; in any other PID namespace
(a simulated host, a container) reboot(2) ends only that namespace. Tests run noded in this
machine's initial namespace: the call is refused there before anything happens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from herder.noded import powercycle
from herder.noded import rpc as noded_rpc
from herder.noded.node import Node, NodeSettings, RpcFailure
from herder.noded.powercycle import Facts, refusal


def test_the_rule() -> None:
    service = Facts(initial_namespace=True, parent_pid=1, init_name="systemd",
                    invocation_id="4f1c0a")
    assert refusal(service) is None  # a production host: herder's unit started it
    for unsafe in (Facts(True, 4242, "systemd", "4f1c0a"),  # a shell, a test, a supervisor
                   Facts(True, 1, "systemd", ""),  # an orphan systemd adopted
                   Facts(True, 1, "init", "4f1c0a")):  # another init
        assert "initial PID namespace" in (refusal(unsafe) or "")
    # a host of its own PID namespace (a simulated host, a container): only it ends
    assert refusal(Facts(False, 4242, "herder", "")) is None


def test_this_process_is_in_the_initial_namespace_and_refused() -> None:
    """Where the suite runs (this machine's own namespace) the facts say so."""
    seen = powercycle.facts()
    if not seen.initial_namespace:
        pytest.skip("the tests do not run in the machine's initial PID namespace here")
    assert seen.parent_pid == os.getppid()
    assert refusal(seen) is not None


def test_noded_refuses_the_rpc_before_anything_happens(tmp_path: Path, monkeypatch) -> None:
    if not powercycle.facts().initial_namespace:
        pytest.skip("the tests do not run in the machine's initial PID namespace here")

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("reboot_soon reached from a test")

    monkeypatch.setattr(powercycle, "reboot_soon", never)
    daemon = Node(NodeSettings(node_name="node1", state_dir=tmp_path / "state",
                                     run_dir=tmp_path / "run", hmac_key=b"k" * 40,
                                     libvirt_uri="test:///default",
                                     file_root=tmp_path / "root"))
    with pytest.raises(RpcFailure, match="refusing to power-cycle: noded runs in the "
                                         "machine's initial PID namespace"):
        noded_rpc.dispatch(daemon, "node_powercycle", {})
    assert not (tmp_path / "state" / "powercycle.log").exists()
    assert daemon.powercycled == []
