"""noded's lease keeper when the master answers that this node is offline (noded.fence): the
node stands down, alive — its domains destroyed, none started, its watchdog disarmed — rather
than letting the lease run out and the watchdog reset it (maintd's evacuation takes a living
node offline for its repair)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from herder.noded import fence


class Hypervisor:
    def __init__(self, domains: dict[str, str], undying: tuple[str, ...] = ()) -> None:
        self.domains = dict(domains)
        self.undying = undying

    def list_domains(self) -> dict[str, str]:
        return dict(self.domains)

    def destroy(self, name: str) -> None:
        if name not in self.undying:
            self.domains[name] = "shutoff"


class Keeper(fence.LeaseKeeper):
    answer: str | None = "renewed by the master"

    def participates(self) -> bool:
        return True

    def _ask_master(self) -> str | None:
        return self.answer


def keeper(tmp_path: Path, hv: Hypervisor) -> tuple[Keeper, Path]:
    device = tmp_path / "watchdog"  # a file: every write is kept (pets "1", magic close "V")
    device.touch()
    daemon = SimpleNamespace(hv=hv, node_params=lambda: {"watchdog_device": str(device),
                                                         "watchdog_timeout": 10})
    clock = [100.0]
    lease = Keeper(daemon, clock=lambda: clock[0])  # type: ignore[arg-type]
    return lease, device


def test_an_offline_answer_destroys_the_domains_and_disarms_the_watchdog(tmp_path) -> None:
    hv = Hypervisor({"web1": "running", "old": "shutoff"})
    lease, device = keeper(tmp_path, hv)
    lease.renew_once()
    assert lease.holding and lease.watchdog is not None and device.read_bytes() == b"1"
    lease.answer = fence.OFFLINE_ANSWER
    lease.renew_once()
    assert hv.domains == {"web1": "shutoff", "old": "shutoff"}
    assert not lease.holding and lease.fenced and lease.refusal()
    assert lease.watchdog is None and device.read_bytes().endswith(b"V")
    lease.answer = "renewed by the master"  # back online: held again, armed again
    lease.renew_once()
    assert lease.holding and lease.refusal() is None and lease.watchdog is not None


def test_a_domain_that_survives_keeps_the_watchdog_armed(tmp_path) -> None:
    """What noded cannot stop is the watchdog's to stop: it stays armed and unpetted."""
    hv = Hypervisor({"web1": "running"}, undying=("web1",))
    lease, device = keeper(tmp_path, hv)
    lease.renew_once()
    lease.answer = fence.OFFLINE_ANSWER
    lease.renew_once()
    assert not lease.holding and lease.watchdog is not None
    assert not device.read_bytes().endswith(b"V")


def test_no_answer_is_not_an_offline_answer(tmp_path) -> None:
    """Without an answer the lease runs out at its time, not before."""
    hv = Hypervisor({"web1": "running"})
    lease, _device = keeper(tmp_path, hv)
    lease.renew_once()
    lease.answer = None
    lease._ask_candidates = lambda: None  # type: ignore[method-assign]
    lease.renew_once()
    assert lease.holding and hv.domains["web1"] == "running"
