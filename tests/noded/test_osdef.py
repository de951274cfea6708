"""OS definitions: loading, variants, the OS API environment per version, running scripts."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from herder.core import model
from herder.noded import osdef as os_definitions
from tests.conftest import build_config

DUMP_ENV = """#!/bin/sh
env > "$DUMP_TO"
"""

OsFactory = Callable[..., Path]


@pytest.fixture
def make_os(tmp_path: Path) -> OsFactory:
    """Create an OS directory under tmp_path/<search>/<name> with env-dumping scripts."""

    def make(name: str, api: str = "15\n", variants: str | None = None,
             parameters: str | None = None, search: str = "os", scripts: dict[str, str] | None
             = None, with_verify: bool = False) -> Path:
        path = tmp_path / search / name
        path.mkdir(parents=True)
        (path / "ganeti_api_version").write_text(api)
        names = ["create", "export", "import", "rename"] + (["verify"] if with_verify else [])
        for script in names:
            body = (scripts or {}).get(script, DUMP_ENV)
            (path / script).write_text(body)
            (path / script).chmod(0o755)
        if variants is not None:
            (path / "variants.list").write_text(variants)
        if parameters is not None:
            (path / "parameters.list").write_text(parameters)
        return path

    return make


def _inst(**changes: object) -> os_definitions.OsInstanceData:
    base: dict[str, object] = dict(
        name="vm1.example.com", os="debian+squeeze", hypervisor="kvm",
        disks=[os_definitions.OsDisk("/dev/drbd0"),
               os_definitions.OsDisk("/dev/xenvg/disk1", access="ro")],
        nics=[os_definitions.OsNic(mac="aa:00:00:00:00:01", ip="192.0.2.5", mode="bridged",
                                   link="br0"),
              os_definitions.OsNic(mac="aa:00:00:00:00:02", mode="routed", link="rt1"),
              os_definitions.OsNic(mac="aa:00:00:00:00:03", mode="openvswitch")],
        hvparams={"kernel_path": "/boot/vmlinuz", "disk_type": "paravirtual",
                  "nic_type": "e1000", "acpi": True},
        beparams={"maxmem": 1024, "vcpus": 2},
        osparams={"dhcp-timeout": "30", "root_size": "10G"},
    )
    base.update(changes)
    return os_definitions.OsInstanceData(**base)  # type: ignore[arg-type]


# --- loading -----------------------------------------------------------------------------------


def test_find_os_with_variants(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("debian", api="10\n15\n", variants="squeeze\n\n# comment\nwheezy\nsqueeze\n")
    osdef = os_definitions.find_os("debian+wheezy", tmp_path / "os")
    assert osdef.name == "debian"
    assert osdef.api_versions == (10, 15)
    assert osdef.api_version == 15
    assert osdef.variants == ("squeeze", "wheezy")
    assert osdef.script_path("create") == tmp_path / "os" / "debian" / "create"


def test_search_path_order_and_not_found(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("debian", api="10\n", search="first")
    make_os("debian", api="15\n", search="second")
    make_os("centos", api="15\n", search="second")
    path = [tmp_path / "missing", tmp_path / "first", tmp_path / "second"]
    assert os_definitions.find_os("debian", path).api_versions == (10,)
    assert os_definitions.find_os("centos", path).path == tmp_path / "second" / "centos"
    with pytest.raises(os_definitions.OsNotFoundError, match="'nope' not found"):
        os_definitions.find_os("nope", path)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: (p / "ganeti_api_version").write_text("5\n"), "not supported"),
        (lambda p: (p / "ganeti_api_version").write_text("fifteen\n"), "integers"),
        (lambda p: (p / "ganeti_api_version").write_text("\n"), "no API version"),
        (lambda p: (p / "ganeti_api_version").unlink(), "missing"),
        (lambda p: (p / "create").chmod(0o644), "not executable"),
        (lambda p: (p / "rename").unlink(), "rename .*missing|missing"),
        (lambda p: (p / "variants.list").write_text("\n# none\n"), "no supported OS variant"),
        (lambda p: (p / "import").unlink() or (p / "import").mkdir(), "not a regular file"),
    ],
)
def test_invalid_definitions(make_os: OsFactory, tmp_path: Path, setup: Callable[[Path], object],
                             message: str) -> None:
    path = make_os("broken")
    setup(path)
    with pytest.raises(os_definitions.InvalidOsError, match=message):
        os_definitions.find_os("broken", tmp_path / "os")


def test_api20_needs_verify(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("new", api="20\n")
    with pytest.raises(os_definitions.InvalidOsError, match="verify"):
        os_definitions.find_os("new", tmp_path / "os")
    make_os("new2", api="20\n", with_verify=True, parameters="root_size size of /\ndhcp-timeout\n")
    osdef = os_definitions.find_os("new2", tmp_path / "os")
    assert osdef.api_version == 20
    assert osdef.parameters == (("root_size", "size of /"), ("dhcp-timeout", ""))
    assert osdef.script_path("verify").name == "verify"


def test_list_oses_with_variants(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("debian", variants="squeeze\nwheezy\n")
    make_os("plain", api="10\n")
    make_os("broken", api="3\n")
    make_os("debian", api="10\n", search="other")  # shadowed by the first directory
    (tmp_path / "os" / "not-a-dir").write_text("")
    path = [tmp_path / "os", tmp_path / "other"]
    oses = os_definitions.list_oses(path)
    assert [o.name for o in oses] == ["debian", "plain"]
    assert os_definitions.os_names_with_variants(oses) == ["debian+squeeze", "debian+wheezy",
                                                           "plain"]
    diag = {d.name: d for d in os_definitions.diagnose_oses(path)}
    assert set(diag) == {"broken", "debian", "plain"}
    assert diag["broken"].os is None and "not supported" in (diag["broken"].error or "")
    assert diag["debian"].path == tmp_path / "os" / "debian"
    assert os_definitions.list_oses(tmp_path / "nowhere") == []


# --- variants ----------------------------------------------------------------------------------


def test_check_variant(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("debian", variants="squeeze\nwheezy\n")
    make_os("plain", api="10\n")
    debian = os_definitions.find_os("debian", tmp_path / "os")
    plain = os_definitions.find_os("plain", tmp_path / "os")
    assert os_definitions.check_variant(debian, "debian+wheezy") == "wheezy"
    with pytest.raises(os_definitions.OsVariantError,
                       match="unsupported OS variant 'sid'.*force-variant"):
        os_definitions.check_variant(debian, "debian+sid")
    assert os_definitions.check_variant(debian, "debian+sid", force=True) == "sid"
    with pytest.raises(os_definitions.OsVariantError, match="must include a variant"):
        os_definitions.check_variant(debian, "debian")
    assert os_definitions.check_variant(debian, "debian", force=True) is None
    with pytest.raises(os_definitions.OsVariantError, match="empty variant"):
        os_definitions.check_variant(debian, "debian+")
    with pytest.raises(os_definitions.OsVariantError, match="does not refer"):
        os_definitions.check_variant(debian, "plain+squeeze")
    assert os_definitions.check_variant(plain, "plain") is None
    with pytest.raises(os_definitions.OsVariantError, match="does not support variants"):
        os_definitions.check_variant(plain, "plain+x")
    assert os_definitions.check_variant(plain, "plain+x", force=True) == "x"


def test_check_os_params(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("new", api="20\n", with_verify=True, parameters="root_size size\n")
    osdef = os_definitions.find_os("new", tmp_path / "os")
    os_definitions.check_os_params(osdef, {"root_size": "1G"})
    with pytest.raises(os_definitions.OsParameterError, match="bogus.*declared: root_size"):
        os_definitions.check_os_params(osdef, {"root_size": "1G", "bogus": "x"})


# --- environment -------------------------------------------------------------------------------

COMMON = {
    "OS_API_VERSION", "INSTANCE_NAME", "INSTANCE_OS", "HYPERVISOR", "DISK_COUNT", "NIC_COUNT",
    "DEBUG_LEVEL",
}


def test_environment_api15(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("debian", api="10\n15\n", variants="squeeze\nwheezy\n")
    osdef = os_definitions.find_os("debian", tmp_path / "os")
    env = os_definitions.os_environment(osdef, _inst(), debug=1)
    assert set(env) >= COMMON
    assert env["OS_API_VERSION"] == "15"
    assert env["OS_NAME"] == "debian"
    assert env["OS_VARIANT"] == "squeeze"
    assert env["INSTANCE_OS"] == "debian+squeeze"
    assert env["HYPERVISOR"] == "kvm"
    assert "INSTANCE_HYPERVISOR" not in env
    assert env["DEBUG_LEVEL"] == "1"
    assert env["DISK_COUNT"] == "2"
    assert env["DISK_0_PATH"] == "/dev/drbd0" and env["DISK_0_ACCESS"] == "rw"
    assert env["DISK_1_ACCESS"] == "ro" and env["DISK_1_BACKEND_TYPE"] == "block"
    assert env["DISK_0_FRONTEND_TYPE"] == "paravirtual"
    assert env["NIC_COUNT"] == "3"
    assert env["NIC_0_MAC"] == "aa:00:00:00:00:01" and env["NIC_0_IP"] == "192.0.2.5"
    assert env["NIC_0_MODE"] == "bridged"
    assert env["NIC_0_LINK"] == "br0" and env["NIC_0_BRIDGE"] == "br0"
    assert "DISK_0_URI" not in env


def test_environment_userspace_uri(make_os: OsFactory, tmp_path: Path) -> None:
    """A userspace rbd disk: Ganeti's DISK_<n>_URI, and herder's staging file as the path."""
    make_os("debian", api="10\n15\n", variants="squeeze\n")
    osdef = os_definitions.find_os("debian", tmp_path / "os")
    env = os_definitions.os_environment(osdef, _inst(disks=[os_definitions.OsDisk(
        "/tmp/herder-os-install-x/disk0", uri="rbd:herder/u1.rbd.disk0")]))
    assert env["DISK_0_URI"] == "rbd:herder/u1.rbd.disk0"
    assert env["DISK_0_PATH"] == "/tmp/herder-os-install-x/disk0"
    assert env["NIC_1_LINK"] == "rt1" and "NIC_1_BRIDGE" not in env and "NIC_1_IP" not in env
    assert "NIC_2_LINK" not in env and env["NIC_2_MODE"] == "openvswitch"
    assert env["NIC_1_FRONTEND_TYPE"] == "e1000"
    assert env["INSTANCE_HV_kernel_path"] == "/boot/vmlinuz"
    assert env["INSTANCE_HV_acpi"] == "True"
    assert env["INSTANCE_BE_maxmem"] == "1024"
    assert not any(k.startswith("OSP_") for k in env)  # API 20 only
    assert all(isinstance(v, str) for v in env.values())


def test_environment_api10_hides_newer_variables(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("old", api="10\n")
    osdef = os_definitions.find_os("old", tmp_path / "os")
    env = os_definitions.os_environment(osdef, _inst(os="old"))
    assert env["OS_API_VERSION"] == "10"
    for newer in ("OS_VARIANT", "OS_NAME", "INSTANCE_HYPERVISOR"):
        assert newer not in env
    assert not any(k.startswith("OSP_") for k in env)
    assert set(env) >= COMMON
    assert env["INSTANCE_HV_kernel_path"] == "/boot/vmlinuz"  # API 10 had HV/BE params too


def test_environment_explicit_version(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("both", api="10\n15\n", variants="a\n")
    osdef = os_definitions.find_os("both", tmp_path / "os")
    assert "OS_VARIANT" not in os_definitions.os_environment(osdef, _inst(os="both+a"), 10)
    assert os_definitions.os_environment(osdef, _inst(os="both+a"), 15)["OS_VARIANT"] == "a"
    with pytest.raises(os_definitions.OsError, match="does not support API version 20"):
        os_definitions.os_environment(osdef, _inst(), 20)


def test_environment_api20_os_parameters(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("new", api="15\n20\n", with_verify=True)
    osdef = os_definitions.find_os("new", tmp_path / "os")
    env = os_definitions.os_environment(osdef, _inst(os="new"))
    assert env["OS_API_VERSION"] == "20"
    assert env["OSP_DHCP_TIMEOUT"] == "30" and env["OSP_ROOT_SIZE"] == "10G"
    assert env["OS_VARIANT"] == ""  # no variants declared, none given
    assert "OSP_ROOT_SIZE" not in os_definitions.os_environment(osdef, _inst(os="new"), 15)


def test_forced_variant_is_passed_through(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("debian", variants="squeeze\n")
    osdef = os_definitions.find_os("debian", tmp_path / "os")
    assert os_definitions.os_environment(osdef, _inst(os="debian+sid"))["OS_VARIANT"] == "sid"


def test_script_variables() -> None:
    assert os_definitions.script_variables("create") == {}
    assert os_definitions.script_variables("create", reinstall=True) == {"INSTANCE_REINSTALL": "1"}
    assert os_definitions.script_variables("rename", old_name="old.example.com") == {
        "OLD_INSTANCE_NAME": "old.example.com"}
    assert os_definitions.script_variables("import", disk_index=1, disk_path="/dev/x") == {
        "IMPORT_DEVICE": "/dev/x", "IMPORT_INDEX": "1"}
    assert os_definitions.script_variables("export", disk_index=0, disk_path="/dev/y") == {
        "EXPORT_DEVICE": "/dev/y", "EXPORT_INDEX": "0"}
    with pytest.raises(os_definitions.OsError, match="old instance name"):
        os_definitions.script_variables("rename")
    with pytest.raises(os_definitions.OsError, match="disk index"):
        os_definitions.script_variables("import")


def test_instance_data_from_model() -> None:
    config = build_config(nodes=2, drbd_instances=1, plain_instances=1)
    inst = next(i for i in config.instances.values() if i.disk_template == "drbd")
    inst.hvparams = {"kernel_path": "/boot/custom"}
    data = os_definitions.OsInstanceData.from_model(config, inst, ["/dev/drbd0"])
    assert data.name == inst.name and data.os == inst.os and data.hypervisor == "kvm"
    assert data.disks == [os_definitions.OsDisk("/dev/drbd0", "rw", "block")]
    assert data.nics[0].mac == inst.nics[0].mac and data.nics[0].link == "br0"
    assert data.nics[0].mode == "bridged" and data.nics[0].ip == inst.nics[0].ip
    assert data.hvparams["kernel_path"] == "/boot/custom"
    assert data.beparams["maxmem"] == 1024
    with pytest.raises(os_definitions.OsError, match="1 disks"):
        os_definitions.OsInstanceData.from_model(config, inst, [])
    file_inst = model.Instance(
        uuid=model.new_uuid(), name="f.example.com", primary_node=inst.primary_node, os="x",
        hypervisor="kvm",
        disks=[model.Disk(uuid=model.new_uuid(), dev_type="file", size=10,
                          logical_id=model.FileId(driver="loop", path="/srv/f/disk0"))],
    )
    config.instances[file_inst.uuid] = file_inst
    fdata = os_definitions.OsInstanceData.from_model(config, file_inst, ["/srv/f/disk0"])
    assert fdata.disks[0].backend_type == "file:loop"


# --- running scripts ---------------------------------------------------------------------------


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.mark.parametrize("api", ["10", "15", "20"])
def test_scripts_see_exactly_the_api_variables(make_os: OsFactory, tmp_path: Path,
                                               api: str) -> None:
    make_os("dump", api=f"{api}\n", variants="v1\nv2\n", with_verify=api == "20",
            parameters="root_size x\n" if api == "20" else None)
    osdef = os_definitions.find_os("dump", tmp_path / "os")
    env = os_definitions.os_environment(osdef, _inst(os="dump+v2"))
    dump = tmp_path / "env.txt"
    result = os_definitions.run_os_script(osdef, "create", {**env, "DUMP_TO": str(dump)},
                                          timeout=10,
                                          log_file=tmp_path / "logs" / "create.log")
    assert result.returncode == 0 and result.script == "create"
    seen = _env_file(dump)
    assert seen["OS_API_VERSION"] == api
    assert seen["LC_ALL"] == "C"
    assert ("OS_VARIANT" in seen) == (api != "10")
    if api != "10":
        assert seen["OS_VARIANT"] == "v2"
    assert ("OSP_ROOT_SIZE" in seen) == (api == "20")
    # Only the given environment (plus LC_ALL, PATH and what sh itself sets) reaches the script.
    extra = set(seen) - set(env) - {"DUMP_TO", "LC_ALL", "PATH", "PWD", "SHLVL", "_", "OLDPWD"}
    assert extra == set()
    assert seen["PWD"] == str(osdef.path)


def test_script_failure_is_reported_with_log_tail(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("fails", scripts={"create": "#!/bin/sh\necho starting\necho 'no space' >&2\nexit 3\n"})
    osdef = os_definitions.find_os("fails", tmp_path / "os")
    log = tmp_path / "create.log"
    with pytest.raises(os_definitions.OsScriptError,
                       match=r"create script failed \(exit code 3\)") as info:
        os_definitions.run_os_script(osdef, "create", {}, timeout=10, log_file=log)
    assert info.value.returncode == 3 and info.value.log_file == log
    assert "no space" in str(info.value)
    text = log.read_text()
    assert "starting" in text and "no space" in text


def test_script_timeout_kills_the_process_group(make_os: OsFactory, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    make_os("slow", scripts={"create": f"#!/bin/sh\nsleep 30 &\necho $! > {marker}\nwait\n"})
    osdef = os_definitions.find_os("slow", tmp_path / "os")
    started = time.monotonic()
    with pytest.raises(os_definitions.OsScriptTimeoutError, match="timed out after 0.5s"):
        os_definitions.run_os_script(osdef, "create", {}, timeout=0.5,
                                     log_file=tmp_path / "slow.log")
    assert time.monotonic() - started < 5
    child = int(marker.read_text())
    deadline = time.monotonic() + 5
    while True:  # the backgrounded grandchild was killed too
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        try:
            if Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":
                break
        except OSError:
            break
        assert time.monotonic() < deadline, "grandchild survived the timeout"
        time.sleep(0.05)


def test_missing_script_is_a_clear_error(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("gone")
    osdef = os_definitions.find_os("gone", tmp_path / "os")
    (osdef.path / "export").unlink()
    with pytest.raises(os_definitions.OsScriptError, match="no executable export script"):
        os_definitions.run_os_script(osdef, "export", {}, timeout=5, log_file=tmp_path / "x.log")


def test_export_stdout_goes_to_the_stream(make_os: OsFactory, tmp_path: Path) -> None:
    make_os("exp", scripts={"export": "#!/bin/sh\nprintf 'DATA:%s' \"$EXPORT_DEVICE\"\n"
                                      "echo progress >&2\n"})
    osdef = os_definitions.find_os("exp", tmp_path / "os")
    out_path = tmp_path / "stream"
    env = {**os_definitions.os_environment(osdef, _inst(os="exp")),
           **os_definitions.script_variables("export", disk_index=0, disk_path="/dev/drbd0")}
    with open(out_path, "wb") as out:
        os_definitions.run_os_script(osdef, "export", env, timeout=10, log_file=tmp_path / "e.log",
                                     stdout=out)
    assert out_path.read_bytes() == b"DATA:/dev/drbd0"
    assert "progress" in (tmp_path / "e.log").read_text()
