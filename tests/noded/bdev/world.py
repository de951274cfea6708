"""A stand-in node for what cannot run here (LV activation, DRBD): the answers of `pvs`, `vgs`,
`lvs`, `lvcreate`..., `drbdsetup`, `drbdmeta` and the text of /proc/drbd, from a small state.

Outputs are shaped like the real captures (../shared/conformance/ganeti/: `proc_drbd84.txt`,
`proc_drbd83_sync.txt`, `bdev-drbd-8.4.txt`, `bdev-drbd-8.3.txt`, LVM's `--separator=|`
listings). The same module answers both herder's code (in-process) and Ganeti 3.0.2's own
storage code (in a subprocess with Debian's python3): so it uses the standard library only.
Every command is recorded, as strings, in `World.commands`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

DRBD_VERSIONS = {
    "8.4": "version: 8.4.2 (api:1/proto:86-101)\n"
           "GIT-hash: 7ad5f850d711223713d6dcadc3dd48860321070c build by root@example.com,"
           " 2013-04-10 07:45:25\n",
    "8.3": "version: 8.3.11 (api:88/proto:86-96)\n"
           "GIT-hash: 0de839cee13a4160eed6037c4bddd066645e23c5 build by root@example.com,"
           " 2011-07-11 13:00:00\n",
    "9": "version: 9.0.28 (api:2/proto:86-118)\n"
         "GIT-hash: 5d8ff9bbb2a9f1fc6d2d5aa1d2f3dc3b8a8e2a7d build by root@example.com,"
         " 2021-01-01 00:00:00\n",
}
PERF_LINE = "    ns:0 nr:0 dw:0 dr:0 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:0"
SYNC_LINES = ("    [=====>..............] sync'ed: 34.9% (346112/524288)M\n"
              "    finish: 0:00:05 speed: 59,392 (59,392) K/sec")


def new_state(drbd: str | None = "8.4") -> dict[str, Any]:
    """A node with VG xenvg on two PVs of 10 GiB (8 GiB free each), no LV, no DRBD minor."""
    return {
        "drbd": drbd,
        "pvs": [
            {"name": "/dev/sda5", "vg": "xenvg", "size": 10240.0, "free": 8192.0, "attr": "a--"},
            {"name": "/dev/sdb1", "vg": "xenvg", "size": 10240.0, "free": 8192.0, "attr": "a--"},
        ],
        "lvs": {},  # "vg/lv" -> {size, tags, pvs, stripes, minor}
        "minors": {},  # "N" -> {cs, roles, disks, disk, meta, laddr, raddr, sync}
        "meta_sectors": 262144,  # 128 MiB
        "fail": [],  # argv prefixes (space-joined) that fail
        "next_kernel_minor": 0,
        # the DRBD peer a `connect` finds ({"role": "Primary", "ahead": true}: a primary that
        # wrote while this node was away, so this node resyncs from it); None: a secondary
        "peer": None,
    }


def add_lv(state: dict[str, Any], vg: str, lv: str, size: int, *, stripes: int = 1,
           tags: list[str] | None = None) -> None:
    pvs = [pv["name"] for pv in state["pvs"] if pv["vg"] == vg][:stripes]
    state["lvs"][f"{vg}/{lv}"] = {"size": size, "tags": list(tags or []), "pvs": pvs,
                                  "stripes": stripes, "minor": state["next_kernel_minor"]}
    state["next_kernel_minor"] += 1


def add_minor(state: dict[str, Any], minor: int, *, disk: str | None, meta: str | None,
              laddr: list[Any] | None, raddr: list[Any] | None, cs: str = "Connected",
              roles: str = "Secondary/Secondary", disks: str = "UpToDate/UpToDate",
              sync: bool = False) -> None:
    state["minors"][str(minor)] = {"cs": cs, "roles": roles, "disks": disks, "disk": disk,
                                   "meta": meta, "laddr": laddr, "raddr": raddr, "sync": sync}


class World:
    def __init__(self, state: dict[str, Any]) -> None:
        self.state = copy.deepcopy(state)
        self.commands: list[list[str]] = []

    # --- files ---

    def proc_drbd(self) -> str:
        version = self.state["drbd"]
        if version is None:
            raise FileNotFoundError(2, "No such file or directory", "/proc/drbd")
        text = DRBD_VERSIONS[version]
        if version == "9":
            return text
        for key in sorted(self.state["minors"], key=int):
            minor = self.state["minors"][key]
            if minor["cs"] == "Unconfigured":
                text += f" {key}: cs:Unconfigured\n"
                continue
            text += f" {key}: cs:{minor['cs']} ro:{minor['roles']} ds:{minor['disks']} C r-----\n"
            text += PERF_LINE + "\n"
            if minor["sync"]:
                text += SYNC_LINES + "\n"
        return text

    def lv_exists(self, path: str) -> bool:
        return path.startswith("/dev/") and path[5:] in self.state["lvs"]

    # --- commands ---

    def run(self, argv: list[Any]) -> tuple[int, str, str]:
        argv = [str(arg) for arg in argv]
        self.commands.append(argv)
        joined = " ".join(argv)
        if any(joined.startswith(prefix) for prefix in self.state["fail"]):
            return 5, "", f"{argv[0]}: failure injected by the test\n"
        handler = getattr(self, "cmd_" + argv[0], None)
        if handler is None:
            return 127, "", f"{argv[0]}: command not found\n"
        return handler(argv[1:])

    def cmd_pvs(self, args: list[str]) -> tuple[int, str, str]:
        rows = [f"  {pv['name']}|{pv['vg']}|{pv['free']:.2f}|{pv['attr']}|{pv['size']:.2f}"
                f"|{pv['name']}" for pv in self.state["pvs"]]
        return 0, "\n".join(rows) + "\n", ""

    def cmd_vgs(self, args: list[str]) -> tuple[int, str, str]:
        vgs: dict[str, list[float]] = {}
        for pv in self.state["pvs"]:
            free, size = vgs.setdefault(pv["vg"], [0.0, 0.0])
            vgs[pv["vg"]] = [free + pv["free"], size + pv["size"]]
        rows = [f"  {vg}|{free:.2f}|wz--n-|{size:.2f}" for vg, (free, size) in vgs.items()]
        return 0, "\n".join(rows) + "\n", ""

    def cmd_lvs(self, args: list[str]) -> tuple[int, str, str]:
        if "tags" in args:
            lv = self.state["lvs"].get(args[-1][5:])
            if lv is None:
                return 5, "", f"Failed to find logical volume \"{args[-1][5:]}\"\n"
            return 0, "  " + ",".join(lv["tags"]) + "\n", ""
        rows = []
        if "-ovg_name,lv_name,lv_size,lv_attr" in args:  # Ganeti's GetVolumeList (lv_list)
            for name, lv in sorted(self.state["lvs"].items()):
                vg, lv_name = name.split("/")
                if not args[-1].startswith("-") and vg not in args[args.index(
                        "-ovg_name,lv_name,lv_size,lv_attr") + 1:]:
                    continue
                rows.append(f"  {vg}|{lv_name}|{lv['size']:.2f}|{lv.get('attr', '-wi-ao----')}")
            return 0, "".join(row + "\n" for row in rows), ""
        for name, lv in sorted(self.state["lvs"].items()):
            vg, lv_name = name.split("/")
            devices = ",".join(f"{pv}(0)" for pv in lv["pvs"])
            rows.append(f"  {vg}|{lv_name}|-wi-ao----|253|{lv['minor']}|4096.00|{lv['stripes']}"
                        f"|{devices}")
        return 0, "".join(row + "\n" for row in rows), ""

    def _take(self, vg: str, size: float) -> bool:
        pvs = [pv for pv in self.state["pvs"] if pv["vg"] == vg]
        if sum(pv["free"] for pv in pvs) < size:
            return False
        for pv in pvs:
            used = min(pv["free"], size)
            pv["free"] -= used
            size -= used
        return True

    def cmd_lvcreate(self, args: list[str]) -> tuple[int, str, str]:
        size = int(next(a for a in args if a.startswith("-L"))[2:-1])
        name = next(a for a in args if a.startswith("-n"))[2:]
        if "-s" in args:
            vg = args[-1].split("/")[2]
            stripes = 1
        else:
            stripes = int(next(a for a in args if a.startswith("-i"))[2:])
            vg = args[args.index(next(a for a in args if a.startswith("-i"))) + 1]
        if f"{vg}/{name}" in self.state["lvs"]:
            return 5, "", f"Logical volume \"{name}\" already exists in volume group \"{vg}\"\n"
        if not self._take(vg, size):
            return 5, "", "Insufficient free space\n"
        add_lv(self.state, vg, name, size, stripes=stripes)
        return 0, f"  Logical volume \"{name}\" created.\n", ""

    def cmd_lvremove(self, args: list[str]) -> tuple[int, str, str]:
        lv = self.state["lvs"].pop(args[-1], None)
        if lv is None:
            return 5, "", f"Failed to find logical volume \"{args[-1]}\"\n"
        self.state["pvs"][0]["free"] += lv["size"]
        return 0, "", ""

    def cmd_lvrename(self, args: list[str]) -> tuple[int, str, str]:
        vg, old, new = args
        lv = self.state["lvs"].pop(f"{vg}/{old}", None)
        if lv is None:
            return 5, "", f"Existing logical volume \"{old}\" not found in volume group\n"
        self.state["lvs"][f"{vg}/{new}"] = lv
        return 0, "", ""

    def cmd_lvextend(self, args: list[str]) -> tuple[int, str, str]:
        amount_k = int(args[args.index("-L") + 1][1:-1])
        path = args[args.index("--alloc") + 2]
        lv = self.state["lvs"].get(path[5:])
        if lv is None:
            return 5, "", "Logical volume not found\n"
        if "--test" not in args:
            if not self._take(path.split("/")[2], amount_k / 1024):
                return 5, "", "Insufficient free space\n"
            lv["size"] += amount_k // 1024
        return 0, "", ""

    def cmd_lvchange(self, args: list[str]) -> tuple[int, str, str]:
        lv = self.state["lvs"].get(args[-1][5:])
        if lv is None:
            return 5, "", "Failed to find logical volume\n"
        if args[0] == "--addtag":
            lv["tags"].append(args[1])
        elif args[0] == "--deltag":
            lv["tags"].remove(args[1])
        return 0, "", ""

    def cmd_blockdev(self, args: list[str]) -> tuple[int, str, str]:
        return 0, f"{self.state['meta_sectors']}\n", ""

    def cmd_dd(self, args: list[str]) -> tuple[int, str, str]:
        return 0, "", "128+0 records in\n128+0 records out\n"

    def cmd_drbdmeta(self, args: list[str]) -> tuple[int, str, str]:
        return 0, "", ""

    # --- drbdsetup, 8.4 and 8.3 syntax ---

    def _minor(self, key: str) -> dict[str, Any]:
        return self.state["minors"].setdefault(key, {
            "cs": "StandAlone", "roles": "Secondary/Unknown", "disks": "Diskless/DUnknown",
            "disk": None, "meta": None, "laddr": None, "raddr": None, "sync": False})

    @staticmethod
    def _address(text: str) -> list[Any]:
        _family, rest = text.split(":", 1)
        host, port = rest.rsplit(":", 1)
        return [host, int(port)]

    def cmd_drbdsetup(self, args: list[str]) -> tuple[int, str, str]:
        if args[0].startswith("/dev/drbd"):  # 8.3: drbdsetup /dev/drbdN COMMAND ...
            key, verb, rest = args[0][len("/dev/drbd"):], args[1], args[2:]
        else:
            verb, rest = args[0], args[1:]
            key = ""
            if verb in ("new-resource", "new-minor", "connect", "down"):
                key = rest[0][len("resource"):]
            elif verb != "disconnect":
                key = rest[0]
        minors = self.state["minors"]
        if verb == "show":
            minor = minors.get(key)
            return 0, (self._show(key, minor) if minor else ""), ""
        if verb == "new-resource":
            return 0, "", ""
        if verb == "disconnect":
            if key == "":
                laddr = self._address(rest[0])
                key = next((k for k, m in minors.items() if m["laddr"] == laddr), "")
            if key not in minors:
                return 10, "", "no such connection\n"
            minor = minors[key]
            minor.update(cs="StandAlone", laddr=None, raddr=None)
            minor["roles"] = minor["roles"].split("/")[0] + "/Unknown"
            minor["disks"] = minor["disks"].split("/")[0] + "/DUnknown"
            return 0, "", ""
        if verb == "down":
            minors.pop(key, None)
            return 0, "", ""
        minor = self._minor(key)
        if verb == "new-minor":
            return 0, "", ""
        if verb in ("attach", "disk"):
            data_meta = rest[1:3] if verb == "attach" else rest[0:2]
            minor.update(disk=data_meta[0], meta=data_meta[1])
            minor["disks"] = "UpToDate/" + minor["disks"].split("/")[1]
        elif verb in ("connect", "net"):
            local, remote = rest[1:3] if verb == "connect" else rest[0:2]
            minor.update(cs="Connected", laddr=self._address(local), raddr=self._address(remote))
            peer = self.state.get("peer")  # the peer's role and disk, when it is not the default
            minor["roles"] = minor["roles"].split("/")[0] + "/" + (peer or {}).get(
                "role", "Secondary")
            minor["disks"] = minor["disks"].split("/")[0] + "/UpToDate"
            if (peer or {}).get("ahead"):  # its bitmap has writes this node missed: a resync
                minor.update(cs="SyncTarget", sync=True)
                minor["disks"] = "Inconsistent/UpToDate"
        elif verb == "primary":
            minor["roles"] = "Primary/" + minor["roles"].split("/")[1]
        elif verb == "secondary":
            minor["roles"] = "Secondary/" + minor["roles"].split("/")[1]
        elif verb == "detach":
            minor.update(disk=None, meta=None)
            minor["disks"] = "Diskless/" + minor["disks"].split("/")[1]
        return 0, "", ""

    def _show(self, key: str, minor: dict[str, Any]) -> str:
        def addr(address: list[Any]) -> str:
            return f"ipv4 {address[0]}:{address[1]}"

        if self.state["drbd"] == "8.3":
            text = "disk {\n\ton-io-error     \tdetach;\n}\nprotocol C;\n_this_host {\n"
            text += f"\tdevice\t\t\tminor {key};\n"
            if minor["disk"]:
                text += f"\tdisk\t\t\t\"{minor['disk']}\";\n"
                text += f"\tmeta-disk\t\t\"{minor['meta']}\" [ 0 ];\n"
            if minor["laddr"]:
                text += f"\taddress\t\t\t{addr(minor['laddr'])};\n"
            text += "}\n"
            if minor["raddr"]:
                text += f"_remote_host {{\n\taddress\t\t\t{addr(minor['raddr'])};\n}}\n"
            return text
        text = f"resource resource{key} {{\n    options {{\n    }}\n"
        if minor["laddr"]:
            text += ("    net {\n        cram-hmac-alg           \"md5\";\n"
                     "        after-sb-0pri           discard-zero-changes;\n    }\n")
            text += ("    _remote_host {\n"
                     f"        address                 {addr(minor['raddr'])};\n    }}\n")
        text += "    _this_host {\n"
        if minor["laddr"]:
            text += f"        address                 {addr(minor['laddr'])};\n"
        text += f"        volume 0 {{\n            device                      minor {key};\n"
        if minor["disk"]:
            text += f"            disk                        \"{minor['disk']}\";\n"
            text += f"            meta-disk                   \"{minor['meta']}\";\n"
            text += ("            disk {\n"
                     "                size                    2097152s; # bytes\n"
                     "            }\n")
        text += "        }\n    }\n}\n"
        return text


def dump(state: dict[str, Any]) -> str:
    return json.dumps(state)
