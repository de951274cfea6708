"""The etcd client settings file (core.etcd_settings) and the etcds:// location: every problem
is one line naming the file and the key; nothing here needs a running etcd."""

from __future__ import annotations

from pathlib import Path

import pytest

from herder.core import etcd, etcd_settings
from herder.core.errors import HerderError, StoreError
from herder.core.store import is_etcd_location
from herder.core.store_etcd import open_client, parse_location
from tests.ha.etcd_pki import EtcdPki, make_pki, write_client_settings


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> EtcdPki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def problem(path: Path) -> str:
    with pytest.raises(HerderError) as refused:
        etcd_settings.load(path)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_a_good_file_gives_a_tls_client_with_credentials(pki: EtcdPki, tmp_path: Path) -> None:
    path = write_client_settings(tmp_path / "c.toml", pki, pki.herder, "herder-prod", "s3cret")
    client, cluster = open_client("etcds://127.0.0.1:2379,127.0.0.2:2379/prod",
                                  client_settings=path)
    with client:
        assert cluster == "prod" and client.secure
        assert client.endpoints == ["https://127.0.0.1:2379", "https://127.0.0.2:2379"]
        assert client.tls == etcd.EtcdTls(pki.ca, pki.herder.cert, pki.herder.key)
        assert client.auth is not None and client.auth.user == "herder-prod"
        assert client.auth.password == "s3cret"  # the file's first line, without its newline
        clone = client.clone(timeout=1, retry_for=1)
        assert clone.auth is client.auth and clone.tls == client.tls
        clone.close()


def test_locations() -> None:
    assert parse_location("etcds://a:1,b:2/x") == (["https://a:1", "https://b:2"], "x")
    assert parse_location("etcd://a:1/x") == (["http://a:1"], "x")
    assert is_etcd_location("etcds://a:1/x") and is_etcd_location("etcd://a:1/x")
    assert not is_etcd_location("/var/lib/herder/config.json")
    for bad in ("etcds://a:1", "etcds:///x", "etcds://a:1/x/y"):
        with pytest.raises(StoreError, match=r"bad etcd location .* expected etcds://HOST"):
            parse_location(bad)


def test_the_environment_names_the_file(pki: EtcdPki, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(etcd_settings.ENVIRONMENT, raising=False)
    assert etcd_settings.default_path() == Path("/etc/herder/etcd-client.toml")
    path = write_client_settings(tmp_path / "c.toml", pki, pki.herder, "herder-prod", "pw")
    monkeypatch.setenv(etcd_settings.ENVIRONMENT, str(path))
    assert etcd_settings.default_path() == path
    client, _ = open_client("etcds://127.0.0.1:2379/prod")
    assert client.auth is not None and client.auth.source == str(path.with_suffix(".password"))
    client.close()


def test_problems(pki: EtcdPki, tmp_path: Path) -> None:
    good = write_client_settings(tmp_path / "c.toml", pki, pki.herder, "herder-prod", "pw")
    text = good.read_text()

    path = tmp_path / "typo.toml"
    path.write_text(text + 'usr = "x"\n')
    assert problem(path) == (f"etcd client settings {path}: unknown key 'usr' (known: ca, cert, "
                             "key, user, password_file)")
    path.write_text(text.replace('user = "herder-prod"\n', ""))
    assert problem(path).startswith(f"etcd client settings {path}: the file: object missing "
                                    "required field `user`")
    path.write_text(text.replace(str(pki.ca), "etcd-ca.pem"))
    assert problem(path).startswith(f"etcd client settings {path}: ca: expected `str` matching")
    path.write_text(text.replace(str(pki.ca), "/nonexistent/ca.pem"))
    assert problem(path) == (f"etcd client settings {path}: ca: cannot read /nonexistent/ca.pem:"
                             " No such file or directory")
    path.write_text(text.replace(str(pki.herder.cert), str(pki.with_cn.cert)))
    assert problem(path).startswith(f"etcd client settings {path}: cert: {pki.with_cn.cert} has "
                                    "the CommonName 'herder': etcd's JSON gateway refuses")
    path.write_text(text.replace(str(pki.herder.cert), str(pki.herder.key)))
    assert problem(path).startswith(f"etcd client settings {path}: cert: {pki.herder.key} is no "
                                    "PEM certificate")

    password = good.with_suffix(".password")
    password.chmod(0o644)
    assert problem(good) == (f"etcd client settings {good}: password_file: {password} is "
                             f"readable by every user (mode 0644); chmod o-rwx {password}")
    password.chmod(0o600)
    password.write_text("\n")
    with pytest.raises(HerderError, match=rf"password_file: {password} is empty"):
        open_client("etcds://127.0.0.1:2379/prod", client_settings=good)
    assert problem(tmp_path / "missing.toml") == (
        f"cannot read etcd client settings {tmp_path / 'missing.toml'}: No such file or directory")


def test_a_key_that_does_not_match_is_one_line(pki: EtcdPki, tmp_path: Path) -> None:
    path = write_client_settings(tmp_path / "c.toml", pki, pki.herder, "herder-prod", "pw")
    path.write_text(path.read_text().replace(str(pki.herder.key), str(pki.root.key)))
    with pytest.raises(HerderError) as refused:
        open_client("etcds://127.0.0.1:2379/prod", client_settings=path)
    assert str(refused.value) == (
        f"etcd client settings {path}: etcd client certificate {pki.herder.cert} (key "
        f"{pki.root.key}): key values mismatch")
