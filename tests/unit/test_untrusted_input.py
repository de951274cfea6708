"""Issue 18, items 7-9 at the pure edges: documents nested too deeply are refused before any
recursive decoder sees them (`core.untrusted`, every JSON edge), names follow Ganeti's rules
(`core.names`), paths built from names stay inside their directory (`core.paths`), parameters
get Ganeti's type and range checks at submission (`masterd.jobs.opcodes`), and noded checks each
RPC's arguments (the contract's calls, `core.rpcdefs`, decoded at noded's door)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herder.core import confd, envelope, model, names, notification, paths, rpcauth, untrusted
from herder.core.errors import ConfigError, SignatureError
from herder.masterd.jobs import opcodes
from herder.noded import rpc as noded_rpc

DEEP = 100_000


def nested(depth: int, opener: str = "[", closer: str = "]") -> str:
    return opener * depth + closer * depth


def deep_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


# --- item 9: depth limits -----------------------------------------------------------------------

@pytest.mark.parametrize("text", [nested(DEEP), deep_object(DEEP), nested(untrusted.MAX_DEPTH + 1)])
def test_deep_documents_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(untrusted.BadDocument, match="nested too deeply") as caught:
        untrusted.loads(text, what="request body")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("request body")
    with pytest.raises(untrusted.BadDocument, match="nested too deeply"):
        untrusted.decode(text.encode())


def test_depth_limit_is_exact_and_strings_do_not_count() -> None:
    assert untrusted.loads(nested(untrusted.MAX_DEPTH)) is not None
    brackets_in_a_string = '{"x": "' + "[" * 1000 + '{{{"}'
    assert untrusted.loads(brackets_in_a_string) == {"x": "[" * 1000 + "{{{"}
    escaped_quote = '["\\"[[[[", ' + nested(3) + "]"
    assert untrusted.loads(escaped_quote)[0] == '"[[[['


def test_size_limit_and_bad_json_are_bad_documents() -> None:
    with pytest.raises(untrusted.BadDocument, match="too large"):
        untrusted.loads("[" + "1," * 100 + "1]", max_bytes=50)
    for bad in ("{", "[1,]", "NaN", b"\xff\xfe"):
        with pytest.raises(untrusted.BadDocument):
            untrusted.loads(bad)


def test_deep_toml_is_refused() -> None:
    with pytest.raises(untrusted.BadDocument, match="nested too deeply"):
        untrusted.check_toml("x = " + nested(1000))
    with pytest.raises(untrusted.BadDocument, match="nested too deeply"):
        untrusted.check_toml("a" + ".a" * 1000 + " = 1")
    untrusted.check_toml('a.b.c = "[[[[[[[[" # [[[[\n[t]\nx = [[1], [2]]\n')


def test_every_json_edge_refuses_deep_documents_without_recursing() -> None:
    deep = nested(DEEP).encode()
    key = b"k" * 32
    with pytest.raises(SignatureError, match="nested too deeply"):
        envelope.verify(deep, key)
    signed = envelope.sign(deep.decode(), key, "1") if hasattr(envelope, "sign") else None
    if signed is not None:
        with pytest.raises(SignatureError, match="nested too deeply"):
            envelope.verify_data(signed, key)
    with pytest.raises(SignatureError):  # node RPC: outer envelope and the signed call
        rpcauth.check_call(key, deep, method="ping", node="n1", replay=None)
    with pytest.raises(SignatureError, match="nested too deeply"):
        rpcauth.check_call(key, rpcauth.sign_call(key, "ping", "n1", msgspec.json.decode(
            nested(untrusted.MAX_DEPTH))), method="ping", node="n1", replay=None)
    with pytest.raises(notification.NotificationError, match="nested too deeply"):
        notification.parse(deep)
    with pytest.raises((SignatureError, confd.ConfdError)):
        confd.parse_request(envelope.pack(deep), key)
    with pytest.raises(ConfigError, match="nested too deeply"):
        model.decode(deep)


# --- item 8: names and paths ----------------------------------------------------------------

@pytest.mark.parametrize("bad", ["..", "../../etc/x", "a/b", "wéb1", "", ".", "-rf", "a..b",
                                 ".hidden", "x" * 256, "a b", "a\0b"])
def test_instance_names_follow_ganetis_host_name_rules(bad: str) -> None:
    with pytest.raises(names.BadName, match="invalid instance name"):
        names.hostname(bad, "instance name")


def test_good_host_names_are_normalised() -> None:
    assert names.hostname("Web1.Example.COM.") == "web1.example.com"
    assert names.hostname("db_2-a") == "db_2-a"


def test_name_check_resolves_and_refuses_unresolvable_names() -> None:
    assert names.resolve("localhost").name.startswith("localhost")
    with pytest.raises(names.BadName, match="cannot be resolved.*--no-name-check"):
        names.resolve("no-such-host.invalid")


def test_device_and_os_names() -> None:
    with pytest.raises(names.BadName, match="Purely numeric"):
        names.device_name("12", "disk")
    assert names.device_name("none", "disk") is None
    assert names.os_name("debootstrap+default") == "debootstrap+default"
    for bad in ("../x", "deb/x", "", "deb+../x"):
        with pytest.raises(names.BadName):
            names.os_name(bad)


@pytest.mark.parametrize("bad", ["..", ".", "", "../x", "a/b", "a\0b"])
def test_paths_from_names_stay_inside_their_directory(tmp_path: Path, bad: str) -> None:
    with pytest.raises(paths.UnsafeName):
        paths.child(tmp_path, bad, what="instance name")
    with pytest.raises(paths.UnsafeName):
        paths.child(tmp_path, "ok", bad)


def test_child_builds_the_expected_path(tmp_path: Path) -> None:
    assert paths.child(tmp_path, "web1", suffix=".json") == tmp_path / "web1.json"
    assert paths.child(tmp_path, "web1", prefix="add-", suffix=".log") == tmp_path / "add-web1.log"
    assert paths.child(tmp_path, "web1", "disk0") == tmp_path / "web1" / "disk0"
    with pytest.raises(paths.UnsafeName):  # the prefix/suffix cannot make it escape either
        paths.child(tmp_path, ".", suffix=".")


def test_a_config_with_an_unsafe_instance_name_does_not_decode(
        config: model.ConfigData) -> None:
    document = msgspec.json.decode(model.encode(config))
    next(iter(document["instances"].values()))["name"] = "../../etc/x"
    raw = msgspec.json.encode(document)
    with pytest.raises(ConfigError, match="invalid instance name"):
        model.decode(raw)


# --- item 7: parameters at submission -------------------------------------------------------

def parse_op(op: dict[str, object]) -> opcodes.OpCode:
    return opcodes.parse(op)


@pytest.mark.parametrize(("op", "named"), [
    ({"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": "web1",
      "beparams": {"maxmem": -100}}, "maxmem"),
    ({"OP_ID": "OP_CLUSTER_SET_PARAMS", "beparams": {"maxmem": -100}}, "maxmem"),
    ({"OP_ID": "OP_CLUSTER_SET_PARAMS", "beparams": {"vcpus": 0}}, "vcpus"),
    ({"OP_ID": "OP_CLUSTER_SET_PARAMS", "hvparams": {"kvm": {"vnc_bind_address": "x y"}}},
     "vnc_bind_address"),
    ({"OP_ID": "OP_CLUSTER_SET_PARAMS", "hvparams": {"kvm": {"migration_port": 70000}}},
     "migration_port"),
    ({"OP_ID": "OP_CLUSTER_SET_PARAMS", "hvparams": {"kvm": {"disk_cache": "bogus"}}},
     "disk_cache"),
    ({"OP_ID": "OP_INSTANCE_CREATE", "instance_name": "../../etc/x", "disk_template": "plain",
      "disks": [{"size": 1024}], "name_check": False, "ip_check": False}, "instance name"),
    ({"OP_ID": "OP_INSTANCE_CREATE", "instance_name": "web1", "disk_template": "plain",
      "disks": [{"size": -5}], "name_check": False, "ip_check": False}, "disk 0"),
    ({"OP_ID": "OP_INSTANCE_CREATE", "instance_name": "web1", "disk_template": "plain",
      "disks": [{"size": 1024}], "name_check": False, "ip_check": True}, "ip_check"),
    ({"OP_ID": "OP_INSTANCE_RENAME", "instance_name": "web1", "new_name": "..",
      "name_check": False, "ip_check": False}, "instance name"),
])
def test_parameters_are_checked_at_submission_naming_the_parameter(op: dict[str, object],
                                                                   named: str) -> None:
    with pytest.raises(opcodes.OpcodeError) as caught:
        parse_op(op)
    message = str(caught.value)
    assert named in message and "\n" not in message


def test_valid_parameters_pass() -> None:
    op = parse_op({"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": "web1",
                   "beparams": {"maxmem": 2048, "minmem": "default"}})
    assert isinstance(op, opcodes.OpInstanceSetParams)


# --- noded's arguments ----------------------------------------------------------------------

@pytest.mark.parametrize(("method", "args", "named"), [
    ("instance_shutdown", {"name": "../../etc/x"}, "instance name"),
    ("instance_shutdown", {"name": "web1", "timeout": -1}, "timeout"),
    ("blockdev_remove", {"disk": {"dev_type": "file", "logical_id": ["loop", "/srv/x"],
                                  "uuid": "../x"}}, "disk id"),
    ("blockdev_create", {"disk": {"dev_type": "file", "logical_id": ["loop", "/srv/x"],
                                  "size": -1}}, "size"),
    ("blockdev_assemble", {"disk": {"dev_type": "drbd", "logical_id": ["a", "b"]}},
     "drbd logical id"),
    ("blockdev_create", {"disk": {"dev_type": "lvm", "logical_id": []}}, "dev_type"),
    ("file_storage_dir_create", {"file_storage_dir": "srv/x"}, "file storage directory"),
    ("instance_start", {"instance": {"name": "..", "uuid": "u", "memory": 128, "vcpus": 1}},
     "instance name"),
    ("repair_command", {"command": "../../bin/sh"}, "repair command"),
    ("upload_file", {"path": "/x", "data": "", "mode": 1 << 20}, "mode"),
])
def test_noded_refuses_bad_arguments(method: str, args: dict[str, object], named: str) -> None:
    with pytest.raises(noded_rpc.BadArguments, match=named):
        noded_rpc.decode(method, args)


_WHOLE_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\n,:'),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(alphabet='[]{}"\\ab'), inner, max_size=4),
                    max_leaves=30))
def test_the_fast_structure_pass_keeps_the_same_brackets(value: object) -> None:
    """The depth check's pass over a big document keeps exactly the brackets outside strings
    that removing each whole string (the obvious, slow way) keeps."""
    raw = json.dumps(value).encode()
    expected = _WHOLE_STRING.sub(b"", raw).translate(None, bytes(range(256)).translate(
        None, b"[]{}"))
    assert untrusted._structure(raw).translate(None, b'"') == expected


def test_an_empty_nic_list_makes_no_nic_and_a_missing_one_the_default() -> None:
    base = {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": "web1", "disk_template": "plain",
            "disks": [{"size": 1024}], "name_check": False, "ip_check": False}
    assert parse_op({**base, "nics": []}).nics == []  # Ganeti: an instance without NICs
    assert parse_op(base).nics == [{}]  # as `gnt-instance add` without --net (compat 48)
    assert parse_op({**base, "nics": [{"link": "br1"}]}).nics == [{"link": "br1"}]
