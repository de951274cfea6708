"""Node roles: Ganeti's two precedences (query code and confd), and every herder view of a
node's role agrees with core's."""

from __future__ import annotations

import pytest

from herder.core import roles
from herder.masterd import query
from herder.masterd.livecache import EMPTY
from herder.masterd.livefields import RS_NORMAL
from herder.masterd.views import node_view
from tests.conftest import build_config


@pytest.mark.parametrize(("flags", "query", "confd"), [
    ({}, roles.REGULAR, roles.REGULAR),
    ({"master_candidate": True}, roles.CANDIDATE, roles.CANDIDATE),
    ({"drained": True}, roles.DRAINED, roles.DRAINED),
    ({"offline": True}, roles.OFFLINE, roles.OFFLINE),
    ({"drained": True, "offline": True}, roles.DRAINED, roles.DRAINED),
    # only on a hand-made config: Ganeti's query code and its confd disagree
    ({"master_candidate": True, "offline": True}, roles.CANDIDATE, roles.OFFLINE),
    ({"master_candidate": True, "drained": True}, roles.CANDIDATE, roles.DRAINED),
])
def test_ganetis_precedences(flags: dict[str, bool], query: str, confd: str) -> None:
    config = build_config(nodes=3)
    node = next(n for n in config.nodes.values() if n.uuid != config.cluster.master_node)
    node.master_candidate = node.drained = node.offline = False
    for key, value in flags.items():
        setattr(node, key, value)
    assert roles.node_role(node, config.cluster.master_node) == query
    assert roles.confd_node_role(node, config.cluster.master_node) == confd
    master = config.nodes[config.cluster.master_node]
    master.drained = True  # the master stays the master
    assert roles.node_role(master, master.uuid) == roles.confd_node_role(master, master.uuid) \
        == roles.MASTER


def test_the_cli_and_rapi_show_the_same_role() -> None:
    config = build_config(nodes=5)
    others = [n for n in config.nodes.values() if n.uuid != config.cluster.master_node]
    for node in others:
        node.master_candidate = False
    others[0].drained = True
    others[1].offline = True
    others[2].master_candidate, others[2].offline = True, True  # hand-made
    # the CLI's node list prints the query answer's role (Ganeti's letter, as gnt-node list)
    listed = {row[0][1]: row[1] for row in query.answer(config, "node", ["name", "role"],
                                                      EMPTY)["data"]}
    for node in config.nodes.values():
        assert listed[node.name] == (RS_NORMAL, node_view(config, node)["role"])
    assert [node_view(config, n)["role"] for n in others] == ["D", "O", "C", roles.REGULAR]
