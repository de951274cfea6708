"""Reduce a QEMU command line to the devices it gives the guest, so that Ganeti's hand-built
`-drive`/`-net` style and libvirt's `-blockdev`/JSON `-device` style compare."""

from __future__ import annotations

import json
import shlex
from typing import Any

# QEMU's cache modes as (cache.direct, cache.no-flush, write-cache)
CACHE_MODES = {(False, False, True): "writeback", (False, False, False): "writethrough",
               (True, False, True): "none", (True, False, False): "directsync",
               (False, True, True): "unsafe"}
DISK_DRIVERS = {"virtio": "virtio-blk-pci", "ide": "ide-hd", "scsi": "scsi-hd"}


def _options(argv: list[str]) -> list[tuple[str, str]]:
    pairs = []
    index = 0
    while index < len(argv):
        item = argv[index]
        if item.startswith("-") and index + 1 < len(argv) and not argv[index + 1].startswith("-"):
            pairs.append((item, argv[index + 1]))
            index += 2
        else:
            pairs.append((item, ""))
            index += 1
    return pairs


def _keyvalues(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for index, part in enumerate(text.split(",")):
        key, sep, value = part.partition("=")
        if sep:
            values[key] = value
        elif index == 0:
            values[""] = part
        else:
            values[key] = "on"
    return values


def _device(value: str) -> dict[str, Any]:
    if value.startswith("{"):
        return json.loads(value)
    kv = _keyvalues(value)
    kv["driver"] = kv.pop("")
    return kv


def _base() -> dict[str, Any]:
    return {"memory": None, "smp": None, "kernel": None, "initrd": None, "append": None,
            "machine": None, "accel": "tcg", "disks": [], "cdroms": [], "nics": [],
            "vnc": None, "serials": 0, "usb_inputs": [], "uuid": None, "acpi": True,
            "no_reboot": False, "rtc": "utc", "cpu": None, "vga": None, "balloon": False,
            "guest_agent": False, "keymap": None}


def _smp(value: str) -> dict[str, int]:
    kv = _keyvalues(value)
    result = {"cpus": int(kv.pop(""))}
    for key in ("sockets", "cores", "threads"):
        if key in kv:
            result[key] = int(kv[key])
    return result


VGA_DEVICES = {"VGA": "std", "cirrus-vga": "cirrus", "qxl-vga": "qxl", "vmware-svga": "vmware"}


def summarize_ganeti(argv: list[str]) -> dict[str, Any]:
    """Ganeti 3.0's command line (a list, as _ExecuteKVMRuntime runs it)."""
    argv = [str(item) for item in argv]
    summary = _base()
    devices = []
    drives = []
    for option, value in _options(argv[1:]):
        if option == "-m":
            summary["memory"] = int(value)
        elif option == "-smp":
            summary["smp"] = _smp(value)
        elif option in ("-kernel", "-initrd", "-append"):
            summary[option[1:]] = value
        elif option == "-machine":
            kv = _keyvalues(value)
            summary["machine"] = kv[""]
            if kv.get("accel"):
                summary["accel"] = kv["accel"]
        elif option == "-device":
            devices.append(_device(value))
        elif option == "-drive":
            drives.append(_keyvalues(value))
        elif option == "-vnc":
            kv = _keyvalues(value)
            address = kv[""]  # ":N" is QEMU's "every address", as 0.0.0.0:N
            summary["vnc"] = {"address": f"0.0.0.0{address}" if address.startswith(":")
                              else address, "password": "password" in kv}
        elif option == "-serial" and value != "none":
            summary["serials"] += 1
        elif option == "-usbdevice":
            summary["usb_inputs"].append(value)
        elif option == "-uuid":
            summary["uuid"] = value
        elif option == "-no-acpi":
            summary["acpi"] = False
        elif option == "-no-reboot":
            summary["no_reboot"] = True
        elif option == "-rtc":
            summary["rtc"] = _keyvalues(value).get("base", "utc")
        elif option == "-cpu":
            summary["cpu"] = value
        elif option == "-vga":
            summary["vga"] = value
        elif option == "-k":
            summary["keymap"] = value
        elif option == "-netdev":
            kv = _keyvalues(value)
            summary.setdefault("_netdevs", {})[kv["id"]] = kv.get("vhost") == "on"
    by_id = {device.get("id"): device for device in devices}
    for drive in drives:
        if drive.get("media") == "cdrom":
            summary["cdroms"].append({"file": drive["file"], "bus": drive.get("if", "ide")})
            continue
        device = by_id.get(drive["id"]) if "id" in drive else None
        driver = device["driver"] if device else DISK_DRIVERS.get(drive.get("if", "ide"))
        summary["disks"].append({
            "file": drive["file"], "driver": driver, "aio": drive.get("aio", "threads"),
            "cache": drive.get("cache", "writeback"),
            "discard": drive.get("discard", "ignore")})
    netdevs = summary.pop("_netdevs", {})
    for device in devices:
        if "mac" in device:
            summary["nics"].append({"driver": device["driver"], "mac": device["mac"],
                                    "vhost": netdevs.get(device.get("netdev"), False)})
        elif device["driver"] == "virtio-balloon":
            summary["balloon"] = True
        elif device.get("name") == "org.qemu.guest_agent.0":
            summary["guest_agent"] = True
    if summary["vga"] is None:
        summary["vga"] = "std"  # QEMU's default adapter on the pc machine
    if summary["cpu"] is None and summary["accel"] == "tcg":
        summary["cpu"] = "qemu64"  # QEMU's default model under TCG, which libvirt writes out
    return summary


def summarize_libvirt(native: str) -> dict[str, Any]:
    """libvirt's qemu-argv (a shell line with environment assignments first)."""
    words = shlex.split(native)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    summary = _base()
    storage: dict[str, dict[str, Any]] = {}
    formats: dict[str, dict[str, Any]] = {}
    devices = []
    netdevs: dict[str, bool] = {}
    for option, value in _options(words[1:]):
        if option == "-m":
            summary["memory"] = int(_keyvalues(value).get("size", _keyvalues(value).get("")))
        elif option == "-smp":
            summary["smp"] = _smp(value)
        elif option in ("-kernel", "-initrd", "-append"):
            summary[option[1:]] = value
        elif option == "-machine":
            kv = _keyvalues(value)
            summary["machine"] = kv[""]
            if kv.get("acpi") == "off":
                summary["acpi"] = False
        elif option == "-accel":
            summary["accel"] = _keyvalues(value)[""]
        elif option == "-blockdev":
            node = json.loads(value)
            (formats if node.get("driver") == "raw" else storage)[node["node-name"]] = node
        elif option == "-device":
            devices.append(_device(value))
        elif option == "-netdev":
            netdev = _device(value) if value.startswith("{") else _keyvalues(value)
            netdevs[netdev["id"]] = bool(netdev.get("vhost"))
        elif option == "-vnc":
            kv = _keyvalues(value)
            summary["vnc"] = {"address": kv[""], "password": kv.get("password") == "on"}
        elif option == "-uuid":
            summary["uuid"] = value
        elif option == "-no-acpi":
            summary["acpi"] = False
        elif option == "-no-reboot":
            summary["no_reboot"] = True
        elif option == "-rtc":
            summary["rtc"] = _keyvalues(value).get("base", "utc")
        elif option == "-cpu":
            summary["cpu"] = value
        elif option == "-k":
            summary["keymap"] = value
    for device in devices:
        driver = device["driver"]
        if "drive" in device:
            fmt = formats[device["drive"]]
            store = storage[fmt["file"]]
            if driver in ("ide-cd", "scsi-cd"):
                summary["cdroms"].append({"file": store["filename"],
                                          "bus": "ide" if driver == "ide-cd" else "scsi"})
                continue
            cache = store.get("cache", {})
            write_cache = device.get("write-cache", "on") == "on"
            mode = CACHE_MODES[(bool(cache.get("direct")), bool(cache.get("no-flush")),
                                write_cache)]
            summary["disks"].append({
                "file": store["filename"], "driver": driver, "aio": store.get("aio", "threads"),
                "cache": mode, "discard": fmt.get("discard", "ignore")})
        elif "mac" in device:
            summary["nics"].append({"driver": driver, "mac": device["mac"],
                                    "vhost": netdevs.get(device.get("netdev"), False)})
        elif driver == "isa-serial":
            summary["serials"] += 1
        elif driver in ("usb-tablet", "usb-mouse"):
            summary["usb_inputs"].append(driver.removeprefix("usb-"))
        elif driver in VGA_DEVICES:
            summary["vga"] = VGA_DEVICES[driver]
        elif driver.startswith("virtio-balloon"):
            summary["balloon"] = True
        elif device.get("name") == "org.qemu.guest_agent.0":
            summary["guest_agent"] = True
    return summary
