"""The herder-guest OS's heartbeat lines as the real-guest tests read them: the write
sequence's `seq=` and, after it, the block devices and network interfaces the guest sees
(`blk=`, `net=`); a line of an older guest (without them) still parses."""

from __future__ import annotations

from herder.sim.guest import parse_heartbeats

BOOT = "0b6c1f0e-3c1a-4f57-9a55-5d3e0f1a2b3c"
HASH = "ab" * 32


def test_a_beat_lists_the_guests_disks_and_nics_after_its_sequence() -> None:
    log = (f"noise\nherder-guest boot_id={BOOT} uptime=12.50 disk={HASH} seq=7 "
           "blk=vda:131072,vdb:65536 net=eth0=aa:00:00:12:34:56,eth1=aa:00:00:ab:cd:ef\n")
    (beat,) = parse_heartbeats(log)
    assert (beat.boot_id, beat.uptime, beat.disk, beat.seq) == (BOOT, 12.5, HASH, 7)
    assert beat.blocks == {"vda": 131072, "vdb": 65536}
    assert beat.nics == {"eth0": "aa:00:00:12:34:56", "eth1": "aa:00:00:ab:cd:ef"}


def test_none_is_an_empty_list_and_an_older_line_has_no_lists() -> None:
    log = (f"herder-guest boot_id={BOOT} uptime=1.00 disk=none blk=none net=none\n"
           f"herder-guest boot_id={BOOT} uptime=2.00 disk={HASH} seq=3\n")
    empty, older = parse_heartbeats(log)
    assert (empty.blocks, empty.nics, empty.seq) == ({}, {}, None)
    assert (older.blocks, older.nics, older.seq) == (None, None, 3)
