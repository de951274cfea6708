"""`core.libvirt_host` on libvirt's own test driver (in process, `test:///default`): opening,
the kept connection opened again after it died, and the classification of libvirt's errors."""

from __future__ import annotations

import threading

import libvirt
import pytest

from herder.core import libvirt_host

TEST_URI = "test:///default"


def test_open_and_classify_a_missing_domain() -> None:
    conn = libvirt_host.open_connection(TEST_URI, read_only=True, keepalive=True)
    try:
        assert libvirt_host.alive(conn)
        with pytest.raises(libvirt.libvirtError) as missing:
            conn.lookupByName("no-such-domain")
        assert libvirt_host.is_no_domain(missing.value)
        assert not libvirt_host.connection_lost(conn, missing.value)
        assert libvirt_host.message(missing.value) == "Domain not found"
        assert libvirt_host.DOMAIN_STATES[conn.lookupByName("test").state()[0]] == "running"
    finally:
        conn.close()
    assert not libvirt_host.is_no_domain(ValueError("not libvirt's"))
    assert libvirt_host.error_code(ValueError("x")) is None


def test_an_unreachable_libvirtd_is_one_line_naming_the_uri() -> None:
    with pytest.raises(libvirt_host.Unreachable) as err:
        libvirt_host.open_connection("test+unix:///default?socket=/nonexistent/sock")
    text = str(err.value)
    assert text.startswith("libvirt unreachable at test+unix:///default?socket=/nonexistent")
    assert "\n" not in text


def test_the_kept_connection_is_opened_again_after_it_died() -> None:
    opened: list[object] = []
    kept = libvirt_host.Connection(TEST_URI, on_open=opened.append)
    first = kept.get()
    assert kept.get() is first and opened == [first]
    first.close()  # as when libvirtd restarted: the connection is dead
    second = kept.get()
    assert second is not first and opened == [first, second]
    kept.set_uri(TEST_URI)  # the same URI: the connection stays
    assert kept.get() is second
    kept.close()


def test_call_retries_once_on_a_lost_connection_and_passes_other_errors() -> None:
    kept = libvirt_host.Connection(TEST_URI)
    calls: list[object] = []

    def lose_the_first(conn: object) -> str:
        calls.append(conn)
        if len(calls) == 1:
            kept.get().close()  # the connection dies under the call
            raise libvirt.libvirtError("client socket is closed")
        return "done"

    assert kept.call(lose_the_first) == "done"
    assert len(calls) == 2 and calls[0] is not calls[1]

    def always_lost(conn: libvirt.virConnect) -> None:
        conn.close()
        raise libvirt.libvirtError("client socket is closed")

    with pytest.raises(libvirt_host.ConnectionLost, match=f"connection to {TEST_URI} lost"):
        kept.call(always_lost)

    def no_domain(conn: libvirt.virConnect) -> None:
        conn.lookupByName("no-such-domain")

    with pytest.raises(libvirt.libvirtError) as err:
        kept.call(no_domain)
    assert libvirt_host.is_no_domain(err.value)
    kept.close()


def test_on_open_failing_leaves_no_connection() -> None:
    def refuse(_conn: object) -> None:
        raise RuntimeError("cannot restore")

    kept = libvirt_host.Connection(TEST_URI, on_open=refuse)
    with pytest.raises(RuntimeError, match="cannot restore"):
        kept.get()
    kept.on_open = None
    assert libvirt_host.alive(kept.get())
    kept.close()


def test_the_connection_is_shared_safely_between_threads() -> None:
    kept = libvirt_host.Connection(TEST_URI, read_only=True)
    seen: list[object] = []
    lock = threading.Lock()

    def use() -> None:
        conn = kept.get()
        with lock:
            seen.append(conn)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(conn) for conn in seen}) == 1
    kept.close()
