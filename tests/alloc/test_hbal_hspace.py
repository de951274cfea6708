"""`alloc.hbal` and `alloc.hspace`: the hbal and hspace runs `herder balance` and `herder
capacity` print (their whole output is compared with Ganeti's shell tests in
test_htools_shelltests.py when ../shared is there; these run without it)."""

from __future__ import annotations

import pytest

from herder.alloc import hbal, hspace
from herder.alloc.balance import BalanceOptions
from herder.alloc.protocol import InputError, Options
from herder.alloc.textdata import simulate


def test_pick_group_aborts_with_hbals_reasons() -> None:
    cl = simulate(["p,2,1T,32g,8", "p,3,1T,32g,8"])
    with pytest.raises(hbal.Aborted) as many:
        hbal.pick_group(cl, None)
    assert str(many.value) == "Aborting."
    assert many.value.details == ["Found multiple node groups:", "  group-01", "  group-02"]
    with pytest.raises(hbal.Aborted) as unknown:
        hbal.pick_group(cl, "group-09")
    assert unknown.value.details == ["No such node group 'group-09'"]
    view = hbal.pick_group(cl, "group-02")
    assert (view.name, len(view.nodes), view.instances, view.split) == ("group-02", 2, [], [])


def test_selection_and_offline_nodes_refuse_unknown_names() -> None:
    cl = simulate(["p,2,1T,32g,8"])
    with pytest.raises(InputError, match=r'Unknown instance\(s\): \["web1"\]'):
        hbal.select_instances(cl, None, "web1", None)
    with pytest.raises(InputError, match="Unknown node 'node-09'"):
        hbal.mark_offline(cl, ["node-01-001,node-09"])
    hbal.mark_offline(cl, ["node-01-002"])
    assert [n.offline for n in cl.nodes] == [False, True]


def test_util_file_lines_are_checked() -> None:
    cl = simulate(["p,2,1T,32g,8"])
    with pytest.raises(InputError, match="Cannot parse line web1 1 2"):
        hbal.apply_util(cl, "web1 1 2\n")
    with pytest.raises(InputError, match="web1: cannot parse string 'x'"):
        hbal.apply_util(cl, "web1 1 2 x 4\n")


def test_an_empty_group_is_already_balanced() -> None:
    cl = simulate(["p,3,1T,32g,8"])
    balancer, begin = hbal.start(cl, hbal.pick_group(cl, None), BalanceOptions())
    assert (begin.bad_nodes, begin.bad_instances, begin.violating) == (0, 0, 0)
    assert begin.balanced(1e-9)
    assert balancer.run()[1] == []


def test_parse_spec_words_errors_as_hspace() -> None:
    assert hspace.parse_spec(None, "tiered allocation") is None
    assert hspace.parse_spec("10G,1g,2", "tiered allocation") == [9536, 1024, 2]  # SI G in MiB
    with pytest.raises(InputError, match=r"Invalid standard allocation specification '1,2' "
                                         r"\(disk,ram,cpu\[,spindles\]\)"):
        hspace.parse_spec("1,2", "standard allocation")
    with pytest.raises(InputError, match="Invalid tiered allocation specification '1,x,2'$"):
        hspace.parse_spec("1,x,2", "tiered allocation")


def test_run_places_the_standard_spec_until_full() -> None:
    """Two nodes of 4 GiB memory: standard instances of 1 GiB, one node's memory kept free for
    N+1 with plain disks not needed, so both modes place and the figures agree."""
    cl = simulate(["p,2,100g,4g,8"])
    result = hspace.run(cl, Options(), disk_template="plain", spindle_use=None, max_length=None,
                        accept_existing=False, independent_groups=False,
                        tiered_alloc=None, standard_alloc=[1024, 1024, 1])
    placed = len(result.standard.run.placed)
    assert placed > 0 and result.standard_spec == (1024, 1024, 1, 1)
    assert result.initial.instances == []  # the modes ran on copies
    assert len(result.standard.cluster.instances) == placed
    keys = hspace.machine_readable(result)
    assert keys["HTS_ALLOC_INSTANCES"] == placed == keys["HTS_FIN_INST_CNT"]
    assert keys["HTS_CLUSTER_NODES"] == 2 and keys["HTS_INI_INST_CNT"] == 0
    assert keys["HTS_OK"] == 1
    memory, _disk, _vcpu = hspace.efficiency(result.standard.cluster)
    assert memory > 0
