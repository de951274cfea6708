"""`ext`: a volume of an ExtStorage provider (logical id `[provider, volume name]`), Ganeti's
ExtStorage interface.

A provider is a directory named after it in the first directory of the search path that has
one (`/srv/ganeti/extstorage`, `/usr/local/lib/ganeti/extstorage`, ...), holding the
executable scripts `create`, `attach`, `detach`, `remove`, `grow`, `setinfo`, `verify`
(required), `open`, `close`, `snapshot` (optional) and `parameters.list` (one `name
description` per line). Scripts run in the provider's directory with Ganeti's environment:
`VOL_NAME`, `VOL_CNAME`, `VOL_UUID`, `EXTP_<PARAM>` for each disk parameter, and per action
`VOL_SIZE`, `VOL_NEW_SIZE`, `VOL_METADATA`, `VOL_SNAPSHOT_NAME`, `VOL_SNAPSHOT_SIZE`,
`VOL_OPEN_EXCLUSIVE`. `attach` prints the block device path on its first line and, optionally,
userspace URIs (`kvm:...`) on the next ones.

Beyond Ganeti: every script has a timeout (`Host.ext_timeout`; a hanging script is killed with
its process group), errors are one line, and a create that fails (or hangs, or whose volume
cannot be attached) runs the provider's `remove`, so nothing is left half-created.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herder.core import paths
from herder.core.diskobjects import Disk
from herder.noded.bdev.base import BlockDev, BlockDevError, CommandResult, Host

log = logging.getLogger(__name__)

REQUIRED_SCRIPTS = ("create", "remove", "grow", "attach", "detach", "setinfo", "verify")
# `rollback` is herder's addition (Ganeti's interface has none): the volume takes the content
# of its snapshot VOL_SNAPSHOT_NAME (docs/real-nodes.md, compat B57)
OPTIONAL_SCRIPTS = ("snapshot", "open", "close", "rollback")
PARAMETERS_FILE = "parameters.list"
_PROVIDER_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]+$")  # Ganeti's EXT_PLUGIN_MASK


@dataclass(frozen=True)
class Provider:
    name: str
    path: Path
    scripts: Mapping[str, Path | None]
    parameters: tuple[tuple[str, str], ...]  # (name, description)


def find_provider(host: Host, name: str) -> Provider:
    """The provider `name` from the search path; one line saying what is wrong otherwise."""
    if not _PROVIDER_NAME_RE.match(name):
        raise BlockDevError(f"Invalid ExtStorage provider name '{name}'")
    directory = next((base / name for base in host.es_search_path if (base / name).is_dir()),
                     None)
    if directory is None:
        raise BlockDevError(f"Directory for External Storage Provider {name} not found in"
                            f" search path ({', '.join(map(str, host.es_search_path))})")
    scripts: dict[str, Path | None] = {}
    for script in (*REQUIRED_SCRIPTS, *OPTIONAL_SCRIPTS, PARAMETERS_FILE):
        path = directory / script
        required = script not in OPTIONAL_SCRIPTS
        try:
            st = path.stat()
        except OSError as err:
            if not required:
                scripts[script] = None
                continue
            raise BlockDevError(f"File '{script}' under path '{directory}' is missing"
                                f" ({err.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            raise BlockDevError(f"File '{script}' under path '{directory}' is not a regular"
                                " file")
        if script != PARAMETERS_FILE and not st.st_mode & stat.S_IXUSR:
            raise BlockDevError(f"File '{script}' under path '{directory}' is not executable")
        scripts[script] = path
    parameters_path = scripts.pop(PARAMETERS_FILE)
    assert parameters_path is not None
    try:
        lines = parameters_path.read_text().splitlines()
    except OSError as err:
        raise BlockDevError(f"Error while reading the EXT parameters file at"
                            f" {parameters_path}: {err.strerror}") from None
    parameters = tuple((parts[0], parts[1] if len(parts) > 1 else "")
                       for parts in (line.split(None, 1) for line in lines) if parts)
    return Provider(name, directory, scripts, parameters)


def environment(volume: str, params: Mapping[str, object], *, size: int | None = None,
                grow: int | None = None, metadata: str | None = None, name: str | None = None,
                uuid: str | None = None, snap_name: str | None = None,
                snap_size: int | None = None, exclusive: bool | None = None) -> dict[str, str]:
    """Ganeti's ExtStorage environment for one action."""
    env = {"VOL_NAME": volume}
    env.update({f"EXTP_{key.upper()}": str(value) for key, value in params.items()})
    optional = {"VOL_SIZE": size, "VOL_NEW_SIZE": grow, "VOL_METADATA": metadata,
                "VOL_CNAME": name, "VOL_UUID": uuid, "VOL_SNAPSHOT_NAME": snap_name,
                "VOL_SNAPSHOT_SIZE": snap_size, "VOL_OPEN_EXCLUSIVE": exclusive}
    env.update({key: str(value) for key, value in optional.items() if value is not None})
    return env


def run_action(host: Host, action: str, provider_name: str, volume: str,
               params: Mapping[str, object], **env_values: Any) -> CommandResult | None:
    """Run one provider script; None when an optional script is absent."""
    provider = find_provider(host, provider_name)
    script = provider.scripts.get(action)
    if script is None:
        if action in OPTIONAL_SCRIPTS:
            log.info("provider %s has no %s script, skipping", provider_name, action)
            return None
        raise BlockDevError(f"'{action}' is not an ExtStorage action")
    env = environment(volume, params, **env_values)  # env_values: environment()'s keywords
    result = host.run([str(script)], env=env, timeout=host.ext_timeout, cwd=str(provider.path))
    if action != "attach":
        _log_output(host, action, provider_name, volume, result)
    if result.timed_out:
        raise BlockDevError(f"ExtStorage provider {provider_name}: {action} of {volume} timed"
                            f" out after {host.ext_timeout:g} s (killed)")
    if result.failed:
        raise BlockDevError(f"ExtStorage provider {provider_name}: {action} of {volume}"
                            f" failed ({result.fail_reason}): {result.last_lines(3)}")
    return result


def _log_output(host: Host, action: str, provider: str, volume: str,
                result: CommandResult) -> None:
    """Ganeti keeps each script's output in its ExtStorage log directory."""
    if host.es_log_dir is None:
        return
    stamp = time.strftime("%Y-%m-%d_%H_%M_%S")
    try:
        path = paths.child(host.es_log_dir, f"{action}-{provider}-{volume}-{stamp}",
                           suffix=".log", what="ExtStorage volume")
        path.write_text(result.stdout + result.stderr)
    except paths.UnsafeName as err:
        log.warning("output of %s not kept: %s", action, err)
    except OSError as err:
        log.warning("cannot write %s: %s", path, err.strerror)


def verify_parameters(host: Host, provider_name: str, params: Mapping[str, object]) -> None:
    """Refuse parameters the provider does not list, then run its `verify` script."""
    provider = find_provider(host, provider_name)
    known = {name for name, _ in provider.parameters}
    unknown = sorted(set(params) - known - {"access"})
    if unknown:
        raise BlockDevError(f"ExtStorage provider {provider_name} does not support the"
                            f" parameter(s) {', '.join(unknown)}")
    run_action(host, "verify", provider_name, "", params)


class ExtStorageDevice(BlockDev):
    dev_type = "ext"

    def __init__(self, disk: Disk, children: Sequence[BlockDev | None], host: Host) -> None:
        super().__init__(disk, children, host)
        lid = disk.ext_id
        self.provider, self.volume = lid.provider, lid.name
        self.uris: list[str] = []
        self.attach()

    def _action(self, action: str, **env_values: object) -> CommandResult | None:
        return run_action(self.host, action, self.provider, self.volume, self.params,
                          name=self.disk.name, uuid=self.disk.uuid, **env_values)

    @classmethod
    def create(cls, disk: Disk, children: Sequence[BlockDev | None], host: Host, *,
               excl_stor: bool = False) -> ExtStorageDevice:
        if excl_stor:
            raise BlockDevError("ExtStorage disks cannot be used with exclusive storage")
        lid = disk.ext_id
        find_provider(host, lid.provider)  # a bad provider is refused before anything runs
        try:
            run_action(host, "create", lid.provider, lid.name, disk.params, size=disk.size,
                       name=disk.name, uuid=disk.uuid)
            device = cls(disk, children, host)
            if not device.attached:
                raise BlockDevError(f"ExtStorage provider {lid.provider}: volume {lid.name}"
                                    " was created but gives no block device or URI")
        except BlockDevError as err:
            cls._undo_create(host, disk)
            raise err from None
        return device

    @staticmethod
    def _undo_create(host: Host, disk: Disk) -> None:
        """Best effort after a failed create: detach and remove what the provider made."""
        lid = disk.ext_id
        for action in ("detach", "remove"):
            try:
                run_action(host, action, lid.provider, lid.name, disk.params, name=disk.name,
                           uuid=disk.uuid)
            except BlockDevError as err:
                log.warning("cleaning up after a failed create: %s", err)

    def attach(self) -> bool:
        self.attached = False
        result = self._action("attach")
        assert result is not None
        lines = result.stdout.split("\n")
        self.dev_path = lines[0].strip() or None
        self.uris = [line.strip() for line in lines[1:] if line.strip()]
        if self.dev_path is None:
            if not self.uris:
                log.error("provider %s gives neither a block device nor a userspace URI for"
                          " %s", self.provider, self.volume)
                return False
            self.attached = True
            return True
        numbers = self.host.block_device_numbers(self.dev_path)
        if numbers is None:
            log.error("%s is not a block device", self.dev_path)
            return False
        self.major, self.minor = numbers
        self.attached = True
        return True

    def remove(self) -> None:
        if not self.minor and not self.attach():
            return
        self.shutdown()
        self._action("remove")

    def rename(self, new_logical_id: Sequence[object]) -> None:
        """ExtStorage volumes keep their names (as in Ganeti)."""

    def shutdown(self) -> None:
        if not self.minor and not self.attach():
            return
        self._action("detach")
        self.minor = None
        self.dev_path = None

    def open(self, *, force: bool = False, exclusive: bool = True) -> None:
        self._action("open", exclusive=exclusive)

    def close(self) -> None:
        self._action("close")

    def grow(self, amount: int, *, dryrun: bool, backingstore: bool, excl_stor: bool) -> None:
        if not backingstore:
            return
        if not self.attach():
            raise BlockDevError(f"Can't attach to extstorage device {self.volume} during grow")
        if dryrun:
            return
        self._action("grow", size=self.size, grow=self.size + amount)

    def set_info(self, text: str) -> None:
        text = re.sub(r"^[^A-Za-z0-9_+.]", "_", text)
        text = re.sub(r"[^-A-Za-z0-9_+.]", "_", text)[:128]
        self._action("setinfo", metadata=text)

    def snapshot(self, snap_name: str | None, snap_size: int | None) -> list[object]:
        snap_name = snap_name or self.volume + ".snap"
        snap_size = snap_size or self.size
        provider = find_provider(self.host, self.provider)
        if provider.scripts.get("snapshot") is None:
            raise BlockDevError(f"ExtStorage provider {self.provider} cannot take snapshots")
        run_action(self.host, "snapshot", self.provider, self.volume, self.params,
                   snap_name=snap_name, snap_size=snap_size)
        return [self.provider, snap_name]

    def userspace_uri(self, hypervisor: str) -> str:
        if not self.attach():
            raise BlockDevError(f"Can't attach to ExtStorage device {self.volume}")
        prefix = hypervisor.lower() + ":"
        for uri in self.uris:
            if uri[:len(prefix)].lower() == prefix:
                return uri[len(prefix):]
        raise BlockDevError(f"Userspace access is not supported by the '{self.provider}'"
                            f" ExtStorage provider for the '{hypervisor}' hypervisor")


def rollback(host: Host, disk: Disk, snap_name: str) -> None:
    """The volume takes the content of its snapshot (herder's `rollback` script). The device
    is not attached for it (as constructing one would): the provider refuses while any node
    has the volume attached."""
    lid = disk.ext_id
    provider = find_provider(host, lid.provider)
    if provider.scripts.get("rollback") is None:
        raise BlockDevError(f"ExtStorage provider {lid.provider} cannot roll back to a "
                            "snapshot (it has no rollback script)")
    run_action(host, "rollback", lid.provider, lid.name, disk.params, name=disk.name,
               uuid=disk.uuid, snap_name=snap_name)


def provider_list(host: Host) -> list[Provider | tuple[str, str]]:
    """Every provider on the search path: valid ones, or (name, why not) (Ganeti's diagnose)."""
    found: list[Provider | tuple[str, str]] = []
    seen: set[str] = set()
    for base in host.es_search_path:
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            if name in seen or not (base / name).is_dir():
                continue
            seen.add(name)
            try:
                found.append(find_provider(host, name))
            except BlockDevError as err:
                found.append((name, str(err)))
    return found
