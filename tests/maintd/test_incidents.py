from __future__ import annotations

import pytest

from herder.maintd import incidents

EVAC = {"status": "evacuate", "command": "", "details": {"disk": "sdb"}}
LIVE = {"status": "live-repair", "command": "fix", "details": {}}
FAIL = {"status": "evacuate-failover", "command": "", "details": {}}


def test_same_object_same_incident() -> None:
    incs: list = []
    created = incidents.observe(incs, {"n1": EVAC}, when=1.0)
    assert len(created) == 1 and created[0].repair_status == "noted"
    inc = created[0]
    assert inc.tag == f"maintd:repairready:{inc.uuid}" and inc.action == "evacuate"
    assert incidents.observe(incs, {"n1": dict(EVAC)}, when=2.0) == []
    assert len(incs) == 1


def test_different_details_new_incident_and_other_node() -> None:
    incs: list = []
    incidents.observe(incs, {"n1": EVAC, "n2": EVAC})
    incidents.observe(incs, {"n1": {**EVAC, "details": {"disk": "sdc"}}})
    assert len(incs) == 3
    assert len({i.uuid for i in incs}) == 3


@pytest.mark.parametrize("data", [{"status": "Ok"}, {"status": "bogus"}, "garbage", None, [1],
                                  {"status": 3}])
def test_ok_and_invalid_create_nothing(data: object) -> None:
    incs: list = []
    assert incidents.observe(incs, {"n1": data}) == []


def test_more_invasive_supersedes_milder() -> None:
    incs: list = []
    (live,) = incidents.observe(incs, {"n1": LIVE}, when=1.0)
    (evac,) = incidents.observe(incs, {"n1": EVAC}, when=2.0)
    assert live.repair_status == "canceled" and evac.repair_status == "noted"
    (fo,) = incidents.observe(incs, {"n1": FAIL}, when=3.0)
    assert evac.repair_status == "canceled" and fo.repair_status == "noted"
    # milder one later does not supersede the invasive one
    (live2,) = incidents.observe(incs, {"n1": {**LIVE, "details": 1}}, when=4.0)
    assert live2.repair_status == "canceled" and fo.repair_status == "noted"
    assert incidents.leading(incs)["n1"] is fo


def test_leading_picks_most_invasive_then_oldest() -> None:
    incs: list = []
    incidents.observe(incs, {"n1": EVAC}, when=5.0)
    incidents.observe(incs, {"n2": EVAC}, when=1.0)
    lead = incidents.leading(incs)
    assert set(lead) == {"n1", "n2"}
    a = incidents.new_incident("n3", EVAC, when=2.0)
    b = incidents.new_incident("n3", {**EVAC, "details": 2}, when=1.0)
    assert incidents.leading([a, b])["n3"] is b


def test_cancel() -> None:
    incs: list = []
    (inc,) = incidents.observe(incs, {"n1": EVAC})
    incidents.cancel(incs, inc.uuid)
    assert inc.repair_status == "canceled"
    with pytest.raises(KeyError):
        incidents.cancel(incs, "nope")
    done = incidents.new_incident("n2", EVAC)
    incidents.set_status(done, "completed")
    incidents.cancel([done], done.uuid)
    assert done.repair_status == "completed"


def test_forget_rules() -> None:
    incs: list = []
    (c,) = incidents.observe(incs, {"n1": EVAC})
    (d,) = incidents.observe(incs, {"n2": EVAC})
    (f,) = incidents.observe(incs, {"n3": EVAC})
    (a,) = incidents.observe(incs, {"n4": EVAC})
    incidents.set_status(c, "canceled")
    incidents.set_status(d, "completed")
    incidents.set_status(f, "failed")
    f.tag = incidents.failed_tag(f.uuid)
    f.jobs = [7]
    observed = {"n1": EVAC, "n2": EVAC, "n3": EVAC, "n4": EVAC}
    tags = {"n1": [], "n2": [d.tag], "n3": [], "n4": []}
    # canceled observed: kept; completed tagged: kept; failed but tag job busy: kept
    assert incidents.forget(incs, observed, tags, busy_jobs=[7]) == []
    # the failed one's tag job ended, tag absent -> forgotten at once although observed
    assert incidents.forget(incs, observed, tags) == [f]
    # tag removed but still observed: completed kept
    tags["n2"] = []
    assert incidents.forget(incs, observed, tags) == []
    # no longer observed -> canceled and completed forgotten; active never
    assert incidents.forget(incs, {"n4": EVAC}, tags) == [c, d]
    assert incidents.forget(incs, {}, {}) == [] and incs == [a]


def test_forget_finalized_on_gone_node() -> None:
    inc = incidents.new_incident("gone", EVAC)
    incidents.set_status(inc, "completed")
    incs = [inc]
    assert incidents.forget(incs, {"gone": EVAC}, {}) == [inc]
