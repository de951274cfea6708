"""libvirtd's configuration: TLS only, client certificates of libvirt's own CA."""

from __future__ import annotations

from pathlib import Path

from herder.core import libvirtd_conf
from herder.core.libvirtd_conf import LibvirtPki
from herder.noded.kvm import migration


def test_tls_only_with_certificates_of_libvirts_own_ca() -> None:
    text = libvirtd_conf.libvirtd_conf(
        listen_address="198.18.0.1", pki=LibvirtPki(Path("/var/lib/herder/libvirt-pki")),
        host_uuid="u-1")
    lines = set(text.splitlines())
    assert {"listen_tls = 1", "listen_tcp = 0", 'listen_addr = "198.18.0.1"',
            "tls_no_verify_certificate = 0", "tls_no_sanity_certificate = 0",
            'auth_tls = "none"', 'ca_file = "/var/lib/herder/libvirt-pki/cacert.pem"',
            'host_uuid = "u-1"'} <= lines
    # the CA signs the current nodes' certificates only: a DN list (read at start) adds nothing
    assert not any(line.startswith("tls_allowed_dn_list") for line in lines)
    assert not any(line.startswith("listen_tcp = 1") for line in lines)
    # a client's queries waiting on a migrating domain do not stop libvirtd reading it
    assert {"max_client_requests = 16", "max_workers = 48"} <= lines


def test_destination_uri_names_the_pki_directory() -> None:
    pki = LibvirtPki(Path("/var/lib/herder/libvirt-pki"))
    assert libvirtd_conf.tls_uri("198.18.0.2", pki=pki) == \
        "qemu+tls://198.18.0.2:16514/system?pkipath=/var/lib/herder/libvirt-pki"
    assert libvirtd_conf.tls_uri("2001:db8::2").startswith("qemu+tls://[2001:db8::2]:16514/")


def test_migration_settings_follow_ganeti_hvparams() -> None:
    hvparams = {"migration_mode": "non-live", "migration_bandwidth": 64,
                "migration_downtime": 100}
    settings = migration.MigrationSettings.from_hvparams(hvparams)
    assert settings == migration.MigrationSettings(False, 64, 100)
    assert migration.MigrationSettings.from_hvparams(hvparams, live=True).live
    import libvirt

    flags = migration.migration_flags(settings, persist=False)
    assert flags & libvirt.VIR_MIGRATE_TUNNELLED and flags & libvirt.VIR_MIGRATE_PEER2PEER
    assert not flags & libvirt.VIR_MIGRATE_LIVE
    assert not flags & (libvirt.VIR_MIGRATE_COMPRESSED | libvirt.VIR_MIGRATE_AUTO_CONVERGE)


def test_migration_caps_become_libvirts_flags() -> None:
    import libvirt
    import pytest

    settings = migration.MigrationSettings.from_hvparams(
        {"migration_caps": "xbzrle:auto-converge"})
    flags = migration.migration_flags(settings, persist=True)
    assert flags & libvirt.VIR_MIGRATE_COMPRESSED and flags & libvirt.VIR_MIGRATE_AUTO_CONVERGE
    with pytest.raises(migration.MigrationError, match="post-copy a tunnelled migration"):
        migration.MigrationSettings.from_hvparams({"migration_caps": "xbzrle:postcopy-ram"})
    with pytest.raises(migration.MigrationError, match="rdma-pin-all: unknown"):
        migration.MigrationSettings.from_hvparams({"migration_caps": "rdma-pin-all"})


def test_qemu_conf_bounds_the_migration_peer_connection() -> None:
    lines = set(libvirtd_conf.qemu_conf().splitlines())
    assert {"keepalive_interval = 5", "keepalive_count = 3", 'stdio_handler = "file"'} <= lines
