"""herder's remote import/export messages (`core.remote_export`) as Ganeti 3.0.2's own code
checks and makes them (masterd/instance.py, utils/x509.py, run in Debian's python3 from the
peers' library: `rie_driver.py`): Ganeti accepts what herder signs with the shared cluster
domain secret, refuses it under another secret, and herder accepts what Ganeti signs.

Skips cleanly without Ganeti's code (/tmp/groot, from ../shared/peers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from herder.core import cluster_secrets, remote_export
from tests.noded.bdev import harness

pytestmark = pytest.mark.peer

HERE = Path(__file__).resolve().parent
CDS = "0f1e2d3c4b5a69788796a5b4c3d2e1f001234567"


def ca_pem() -> str:
    both = cluster_secrets.self_signed_certificate("cluster-a.example.com").decode()
    return both[both.index("-----BEGIN CERTIFICATE"):]


def run_ganeti(request: dict[str, Any]) -> dict[str, Any]:
    if not (harness.GROOT / "ganeti" / "masterd" / "instance.py").is_file() or \
            not harness.DEBIAN_PYTHON.is_file():
        pytest.skip("Ganeti 3.0's Python code is not unpacked (/tmp/groot, from ../shared/peers)")
    answer: dict[str, Any] = harness.run_ganeti_driver(HERE / "rie_driver.py", request,
                                                       "remote export code")
    return answer


def herder_messages(cds: str, pem: str) -> dict[str, Any]:
    return {"handshake": list(remote_export.compute_handshake(cds)),
            "key_name": list(remote_export.sign_key_name(cds, "move-key-1")),
            "signed_ca": remote_export.sign_certificate(cds, pem),
            "disk_info": [list(remote_export.compute_disk_info(
                cds, remote_export.generate_salt(), i, "192.0.2.9", 11000 + i, f"m{i}"))
                for i in range(2)]}


def test_ganeti_accepts_herders_messages_and_herder_accepts_ganetis() -> None:
    pem = ca_pem()
    answer = run_ganeti({"cds": CDS, "ca_pem": pem, **herder_messages(CDS, pem)})
    assert answer["handshake"] == "ok"
    assert answer["key_name"] == "ok"
    assert answer["signed_ca"] == "ok"
    assert answer["disk_info"] == ["ok", "ok"]
    ganeti = answer["ganeti"]
    remote_export.check_handshake(CDS, ganeti["handshake"])
    assert remote_export.check_key_name(CDS, ganeti["key_name"]) == "x509-key"
    cert = remote_export.load_signed_certificate(CDS, ganeti["signed_ca"])
    assert cert.subject.rfc4514_string().endswith("cluster-a.example.com")
    assert remote_export.check_disk_info(CDS, 0, ganeti["disk_info"][0]) == \
        ("192.0.2.7", 11000, "magic0")
    # the same text as Ganeti's, salt for salt
    salt = ganeti["signed_ca"].split(":", 1)[1].split("/")[0].strip()
    assert remote_export.sign_certificate(CDS, pem, salt) == ganeti["signed_ca"]


def test_ganeti_refuses_herders_messages_under_another_secret() -> None:
    pem = ca_pem()
    answer = run_ganeti({"cds": CDS, "ca_pem": pem, **herder_messages("another" + CDS, pem)})
    assert "domain secret" in answer["handshake"]
    assert answer["key_name"].startswith("error")
    assert "signature is invalid" in answer["signed_ca"]
    assert all("HMAC is wrong" in v for v in answer["disk_info"])
