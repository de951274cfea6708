"""herder's list options print what Ganeti's gnt-* lists print, on the same cluster (issue 32 item
3): the real Ganeti 3.0.2 vcluster (../shared/peers/vcluster) with a few instances and tags, its
config.data imported into herder (`cluster import-ganeti`); then `gnt-node list`, `gnt-instance
list`, `gnt-group list`, `gnt-network list` (and the `list-fields` of each, gnt-backup's too)
with `-o FIELD,...`, `--filter`, names, `--no-headers`, `--separator` and `--units` against
`herder node|instance|group list` with the same arguments (offline: the imported config; only
fields the config answers, the live ones need node daemons, so no default columns and no `-o
+FIELD`: the nodes' and instances' defaults are live figures, and a group's NDParams differ by
herder's own node parameters). Skips without ../shared, Debian's Ganeti or root."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ganeti.vcluster import (
    MASTER_DATA,
    NODES,
    VCluster,
    running_vcluster,
    vc_together,
)

NODE_FIELDS = "name,pinst_cnt,sinst_cnt,pinst_list,group,tags,master_candidate,drained," \
              "offline,role,pip,master_capable,vm_capable"
INSTANCE_FIELDS = "name,pnode,snodes,os,disk_template,be/maxmem,be/minmem,be/vcpus,tags," \
                  "admin_state,nic.macs"
GROUP_FIELDS = "name,node_cnt,pinst_cnt,alloc_policy,tags,node_list,pinst_list"
NETWORK = "net1"
NETWORK_FIELDS = "name,network,gateway,mac_prefix,group_list,tags,free_count,reserved_count"
# (list, arguments): each run by gnt-<list> and herder <list>
CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("node", ("-o", NODE_FIELDS)),
    ("node", ("-o", NODE_FIELDS, "--no-headers", "--separator=|")),
    ("node", ("-o", "name,pinst_cnt,tags", "--filter", "pinst_cnt > 0 and not offline")),
    ("node", ("-o", "name,role", "--no-headers", NODES[1], NODES[2])),
    ("instance", ("-o", INSTANCE_FIELDS)),
    ("instance", ("-o", INSTANCE_FIELDS, "--separator", ";", "--units", "g")),
    ("instance", ("-o", "name,be/maxmem", "--units", "m", "--no-headers")),
    ("instance", ("-o", "name,be/maxmem", "--units", "h")),
    ("instance", ("-o", "name,pnode,tags", "--filter", "be/vcpus >= 2 or name =~ /^web/")),
    ("instance", ("-o", "name,pnode", "--filter", "\"role:db\" in tags")),
    ("group", ("-o", GROUP_FIELDS)),
    ("group", ("-o", GROUP_FIELDS, "--no-headers", "--separator= ")),
    ("network", ()),
    ("network", ("-o", NETWORK_FIELDS, "--separator=|")),
    ("network", ("-o", "name,free_count", "--no-headers", NETWORK)),
)
# name, node, memory MiB, vcpus, tags
INSTANCES = (("web1.vcluster.test", NODES[1], 128, 1, ("role:web",)),
             ("web2.vcluster.test", NODES[1], 256, 1, ("role:web", "tier:front")),
             ("db1.vcluster.test", NODES[2], 512, 2, ("role:db",)))


@dataclass
class Pair:
    vcl: VCluster
    config: Path  # herder's config, imported from the vcluster's config.data


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    # a vcluster as freshly started (one a module before left as it found it will do): its
    # instances, tags and network are added here and removed again after this module, which
    # passes it on to the next module (a start is 30-90 s under the suite's load)
    with running_vcluster(reuse=True, keep=True) as vcl:
        # what does not depend on each other side by side (Ganeti runs the jobs at once)
        vc_together(vcl, NODES[0], *(
            ("gnt-instance", "add", "-t", "diskless", "-o", "noop+default", "--no-ip-check",
             "--no-name-check", "--no-start", "-n", node, "-B",
             f"maxmem={memory},minmem={memory // 2},vcpus={vcpus}", name)
            for name, node, memory, vcpus, _tags in INSTANCES),
            ("gnt-node", "add-tags", NODES[2], "rack:b2"),
            ("gnt-group", "add-tags", "default", "site:lab"),
            ("gnt-network", "add", "--network", "192.0.2.0/28", "--gateway", "192.0.2.1",
             "--mac-prefix", "aa:00:01", "--add-reserved-ips", "192.0.2.5", "--tags",
             "use:test", NETWORK))
        vc_together(vcl, NODES[0], *(
            ("gnt-instance", "add-tags", name, *tags) for name, *_, tags in INSTANCES),
            ("gnt-network", "connect", "--nic-parameters", "mode=bridged,link=br9", NETWORK,
             "default"))
        directory = tmp_path_factory.mktemp("imported")
        config = directory / "config.json"
        imported = herder(config, "cluster", "import-ganeti",
                          str(MASTER_DATA / "config.data"))
        assert imported.returncode == 0, imported.stderr
        yield Pair(vcl, config)
        # the disconnect first: Ganeti refuses it while instances of the group are removed
        # ("Instances in node group 'default' changed since locks were acquired", CI)
        vc_together(vcl, NODES[0], ("gnt-network", "disconnect", NETWORK, "default"))
        vc_together(vcl, NODES[0], ("gnt-group", "remove-tags", "default", "site:lab"),
                    ("gnt-node", "remove-tags", NODES[2], "rack:b2"),
                    *(("gnt-instance", "remove", "-f", name) for name, *_ in INSTANCES))
        vcl.vc(NODES[0], "gnt-network", "remove", NETWORK)


def herder(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERDER_")}
    env.update(HERDER_CONFIG=str(config), HERDER_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("kind", "args"), CASES,
                         ids=[f"{kind}:{' '.join(args)}" for kind, args in CASES])
def test_lists_print_as_ganeti(pair: Pair, kind: str, args: tuple[str, ...]) -> None:
    ganeti = pair.vcl.vc(NODES[0], f"gnt-{kind}", "list", *args)
    ours = herder(pair.config, kind, "list", *args)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == ganeti.stdout, f"\nGaneti:\n{ganeti.stdout}\nherder:\n{ours.stdout}"
    assert ganeti.stdout.strip()


def test_an_unknown_field_as_ganeti(pair: Pair) -> None:
    ganeti = pair.vcl.vc(NODES[0], "gnt-node", "list", "-o", "name,nosuchfield", check=False)
    ours = herder(pair.config, "node", "list", "-o", "name,nosuchfield")
    assert ours.returncode == ganeti.returncode != 0
    assert ours.stdout == ganeti.stdout


def test_a_filter_ganeti_refuses_is_refused(pair: Pair) -> None:
    """A list compared with a text: an error in Ganeti, one line in herder (exit 1)."""
    query = 'tags == "role:db"'
    ganeti = pair.vcl.vc(NODES[0], "gnt-instance", "list", "--filter", query, check=False)
    ours = herder(pair.config, "instance", "list", "--filter", query)
    assert ganeti.returncode == 1 and not ganeti.stdout
    assert ours.returncode == 1 and not ours.stdout, ours.stdout
    assert len(ours.stderr.strip().splitlines()) == 1, ours.stderr


def test_a_word_after_a_regular_expression(pair: Pair) -> None:
    """Ganeti reads `or` right after `/^web/` as the expression's flags and refuses the
    filter; herder reads it as the operator (docs/compat.md row 55), as Ganeti reads the
    same filter with the expression in parentheses."""
    args = ("-o", "name,pnode", "--filter")
    bare, parenthesized = "name =~ /^web/ or be/vcpus >= 2", "(name =~ /^web/) or be/vcpus >= 2"
    refused = pair.vcl.vc(NODES[0], "gnt-instance", "list", *args, bare, check=False)
    assert refused.returncode == 1 and "regular expression flags" in refused.stderr
    ganeti = pair.vcl.vc(NODES[0], "gnt-instance", "list", *args, parenthesized)
    for query in (bare, parenthesized):
        ours = herder(pair.config, "instance", "list", *args, query)
        assert (ours.returncode, ours.stdout) == (0, ganeti.stdout), query


@pytest.mark.parametrize(("kind", "fields"), (("node", NODE_FIELDS),
                                              ("instance", INSTANCE_FIELDS),
                                              ("group", GROUP_FIELDS),
                                              ("network", NETWORK_FIELDS),
                                              ("backup", "node,export")))
def test_list_fields_as_ganeti(pair: Pair, kind: str, fields: str) -> None:
    """`list-fields` of the fields compared above: the same names, kinds, titles and
    descriptions, in the same table."""
    names = fields.split(",")
    ganeti = pair.vcl.vc(NODES[0], f"gnt-{kind}", "list-fields", "--separator=|", *names)
    ours = herder(pair.config, kind, "list-fields", "--separator=|", *names)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == ganeti.stdout, f"\nGaneti:\n{ganeti.stdout}\nherder:\n{ours.stdout}"
