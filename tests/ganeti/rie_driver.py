"""Run Ganeti 3.0.2's own remote import/export checks and signatures (masterd/instance.py,
utils/x509.py, utils/hash.py) on messages given on stdin.

Run with Debian's /usr/bin/python3 and PYTHONPATH=/tmp/groot/usr/share/ganeti/3.0. Reads
`{"cds": SECRET, "handshake": [...], "key_name": [...], "signed_ca": PEM, "disk_info": [[...]],
"ca_pem": PEM}`; prints Ganeti's verdict on each of herder's messages ("ok" or the error) and
Ganeti's own messages made with the same secret for herder to check.
"""

import json
import sys

import OpenSSL

from ganeti import utils
from ganeti.masterd import instance

REQUEST = json.load(sys.stdin)
cds = REQUEST["cds"]


def verdict(check):
    try:
        error = check()
    except Exception as err:  # Ganeti raises GenericError
        return f"error: {err}"
    return "ok" if error is None else f"error: {error}"


def key_name_ok():
    name, digest, salt = REQUEST["key_name"]
    return None if utils.VerifySha1Hmac(cds, name, digest, salt=salt) else "wrong hmac"


answer = {
    "handshake": verdict(lambda: instance.CheckRemoteExportHandshake(
        cds, REQUEST["handshake"])),
    "key_name": verdict(key_name_ok),
    "signed_ca": verdict(lambda: utils.LoadSignedX509Certificate(
        REQUEST["signed_ca"], cds) and None),
    "disk_info": [verdict(lambda i=i, info=info: instance.CheckRemoteExportDiskInfo(
        cds, i, info) and None) for i, info in enumerate(REQUEST["disk_info"])],
}
cert = OpenSSL.crypto.load_certificate(OpenSSL.crypto.FILETYPE_PEM, REQUEST["ca_pem"])
salt = utils.GenerateSecret(8)
answer["ganeti"] = {
    "handshake": list(instance.ComputeRemoteExportHandshake(cds)),
    "key_name": ["x509-key", utils.Sha1Hmac(cds, "x509-key", salt=salt), salt],
    "signed_ca": utils.SignX509Certificate(cert, cds, salt),
    "disk_info": [list(instance.ComputeRemoteImportDiskInfo(cds, salt, 0, "192.0.2.7", 11000,
                                                            "magic0"))],
}
print(json.dumps(answer))
