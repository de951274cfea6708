"""`cluster verify`'s node checks and `-H HYPERVISOR:KEY=VALUE` against Ganeti 3.0.2's own code:
the same node answers judged by herder.core.nodeverify and by LUClusterVerifyGroup's methods give
the same codes, severities and messages; the CLI's `-H` parser splits Ganeti's syntax as
cli_opts' _SplitIdentKeyVal does. Skips cleanly without Ganeti's code (/tmp/groot, from
../shared/peers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from herder.cli.instance import hv_option
from herder.core import nodeverify
from herder.core.rpcdefs import node_calls
from tests.conftest import build_config
from tests.noded.bdev import harness

HERE = Path(__file__).parent
START, END = 1100.0, 1101.0
HV_OPTIONS = ["kvm:kernel_path=/boot/vmlinuz,initrd_path=/boot/initrd", "kvm",
              "kvm:kernel_args=console=ttyS0 root=/dev/vda", "xen-pvm:root_path=/dev/xvda1"]


def run_ganeti(request: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = harness.run_ganeti_driver(HERE / "node_verify_driver.py",
                                                       request, "verify code")
    return answer


@pytest.fixture
def ganeti() -> None:
    if not harness.ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")


def os_row(entry: node_calls.OsEntry) -> list[Any]:
    """An OsEntry as Ganeti's NV_OSLIST row (name, path, status, diagnose, variants,
    parameters, API versions, trusted)."""
    return [entry.name, entry.path, entry.valid, entry.diagnose, entry.variants, [],
            entry.api_versions, True]


def os_entry(name: str, variants: list[str], *, valid: bool = True) -> node_calls.OsEntry:
    return node_calls.OsEntry(name=name, path=f"/srv/os/{name}", valid=valid,
                              diagnose="" if valid else "missing file", variants=variants,
                              parameters=[], api_versions=[20] if valid else [])


def test_node_findings_equal_ganetis(ganeti: None) -> None:
    config = build_config(nodes=2, drbd_instances=0, plain_instances=0)
    config.cluster.drbd_usermode_helper = "/bin/true"
    reference, node = sorted(config.nodes.values(), key=lambda n: n.name)
    reference_oses = [os_entry("debootstrap", ["default", "minimal"]), os_entry("image", [])]
    answer = node_calls.NodeVerifyAnswer(
        time=900.0, version="1", vgs={"xenvg": 1000},
        pvs=[node_calls.PvEntry(name="/dev/a:1", vg_name="xenvg", size=1.0, free=1.0)],
        missing_bridges=["xen-br0"], drbd_helper=(True, "/sbin/drbdadm"),
        drbd_version="8.3.16 (api:88/proto:86)",
        oses=[os_entry("debootstrap", ["default"]), os_entry("broken", [], valid=False)])
    reference_answer = node_calls.NodeVerifyAnswer(
        time=START, version="1", vgs={"xenvg": 30000}, pvs=[], missing_bridges=[],
        drbd_helper=(True, "/bin/true"), drbd_version="8.4.11 (api:1/proto:86)",
        oses=reference_oses)
    asked = node_calls.NodeVerify(vg_name="xenvg", bridges=["xen-br0"], drbd=True)
    ours = nodeverify.node_verify_findings(
        config, {reference.uuid: asked, node.uuid: asked},
        {reference.uuid: reference_answer, node.uuid: answer},
        nodeverify.Window(start=START, end=END), "1")
    theirs = run_ganeti({
        "node": node.name, "reference": reference.name, "vg_name": "xenvg",
        "bridges": ["xen-br0"], "drbd_helper": "/bin/true", "window": [START, END],
        "drbd_versions": {reference.name: reference_answer.drbd_version,
                          node.name: answer.drbd_version},
        "reference_oslist": [os_row(e) for e in reference_oses],
        "hv_options": [],
        "answer": {"vglist": answer.vgs, "bridges": answer.missing_bridges,
                   "pvlist": [{"name": pv.name, "vg_name": pv.vg_name, "size": pv.size,
                               "free": pv.free, "attributes": "a-", "lv_list": []}
                              for pv in answer.pvs or []],
                   "drbd-helper": list(answer.drbd_helper or ()), "time": [900, 0],
                   "oslist": [os_row(e) for e in answer.oses or []]}})
    assert sorted((f.code, f.object.removeprefix("node "), f.message, f.severity.upper())
                  for f in ours) == sorted(tuple(f) for f in theirs["findings"])


def test_hypervisor_option_splits_as_ganetis(ganeti: None) -> None:
    theirs = run_ganeti({"node": "n", "reference": "n", "vg_name": None, "bridges": [],
                         "drbd_helper": None, "window": [0, 0], "drbd_versions": {},
                         "reference_oslist": [], "answer": {"oslist": [], "time": [0, 0]},
                         "hv_options": HV_OPTIONS})["hv_options"]
    assert [list(hv_option((value,))) for value in HV_OPTIONS] == theirs


def test_herders_bare_form_and_two_hypervisors() -> None:
    """Beside Ganeti's form, herder's bare KEY=VALUE list (no hypervisor named), values
    holding ':' and '=' intact; two hypervisors in one command are refused."""
    import click

    assert hv_option(("kernel_args=console=ttyS0:115200,acpi=false",)) == (
        None, {"kernel_args": "console=ttyS0:115200", "acpi": "false"})
    assert hv_option(("kvm:acpi=false", "kernel_path=/k")) == (
        "kvm", {"acpi": "false", "kernel_path": "/k"})
    with pytest.raises(click.BadParameter, match="two hypervisors given: kvm and xen-pvm"):
        hv_option(("kvm:acpi=false", "xen-pvm:root_path=/dev/xvda1"))
