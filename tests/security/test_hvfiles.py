"""File-valued hypervisor parameters (issue 18, item 4): `vnc_password_file=/etc/hostname`
made redistribution copy the master's /etc/hostname onto every node. Only files in the
cluster's hypervisor file directory are the cluster's; nothing else is read or sent because of
a parameter (masterd's RAPI refuses such values: tests/security/test_rapi_access.py)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from herder.core import model
from herder.core.noderpc import RpcTransport
from herder.masterd import hvfiles, redist
from tests.conftest import build_config
from tests.rpcfakes import nothing_answer


class RecordingRpc(RpcTransport):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        self.calls.append((node.name, method, dict(args)))
        return nothing_answer(method)


def test_a_parameter_naming_a_file_outside_the_directory_sends_nothing(tmp_path: Path) -> None:
    config_path = tmp_path / "config.json"
    hv_dir = hvfiles.directory(tmp_path)
    hv_dir.mkdir()
    good = hv_dir / "vnc-cluster-password"
    good.write_bytes(b"pw\n")
    sneaky = hv_dir / "sneaky"
    sneaky.symlink_to("/etc/hostname")  # in the directory by name, not once resolved
    config = build_config(3, drbd_instances=1, plain_instances=1)
    config.cluster.hvparams["kvm"] = {"vnc_password_file": str(good)}
    web, other = sorted(config.instances.values(), key=lambda i: i.name)
    web.hvparams["vnc_password_file"] = "/etc/hostname"
    other.hvparams["spice_password_file"] = str(sneaky)
    # on a node that is not the master (the master has the originals: nothing is sent to it)
    other.primary_node = next(uuid for uuid in config.nodes if uuid != config.cluster.master_node)
    plans = redist.plan(config, config_path)
    master = config.node_name(config.cluster.master_node)  # it has the originals
    for plan in plans.values():
        assert "/etc/hostname" not in plan.files
        assert "/etc/hostname" not in plan.ssconf[redist.UPLOAD_LIST].splitlines()
        # the cluster default: every VM-capable node but the master
        assert (str(good) in plan.files) == (plan.name != master)
    rpc = RecordingRpc()
    results = redist.Redistributor(rpc, config_path, None).push(config)
    uploads = [args for _, method, args in rpc.calls if method == "upload_file"]
    sent = {args["path"]: base64.b64decode(args["data"]) for args in uploads}
    assert sent[str(good)] == b"pw\n"
    assert str(sneaky) not in sent and "/etc/hostname" not in sent
    assert Path("/etc/hostname").read_bytes() not in sent.values()
    assert any(str(sneaky) in error for r in results.values() for error in r.errors)


def test_path_rules() -> None:
    where = Path("/var/lib/herder/hypervisor")
    assert hvfiles.path_problem("", where) is None
    assert hvfiles.path_problem("/var/lib/herder/hypervisor/vnc.pw", where) is None
    for bad in ("/etc/hostname", "/var/lib/herder/hypervisor/../hmac.key",
                "/var/lib/herder/hypervisor", "/var/lib/herder/hypervisorX/pw",
                "relative/pw", "/var/lib/herder/hypervisor//pw"):
        assert hvfiles.path_problem(bad, where) is not None, bad
    problems = hvfiles.problems([{"OP_ID": "OP_CLUSTER_SET_PARAMS", "os_hvp": {"deb": {"kvm": {
        "vnc_password_file": "/etc/shadow"}}}, "hvparams": {"kvm": {
            "spice_password_file": 3, "kernel_path": "/boot/vmlinuz"}}}], where)
    assert len(problems) == 2 and "vnc_password_file" in problems[0] + problems[1]
    assert hvfiles.problems({"vnc_password_file": "/var/lib/herder/hypervisor/x"}, None)
