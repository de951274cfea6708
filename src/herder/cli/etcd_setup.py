"""herder's user and role in an etcd with authentication (`herder etcd setup`, docs/ha.md).

Per cluster, herder gets:
- the role `herder-<CLUSTER>`: read and write on the keys under `/herder/<CLUSTER>/` (the
  config, the writers' lock, the master key, the jobs) and no other permission;
- one user, the client settings file's `user`, with that role and no other; its password is the
  settings' password file.
etcd's `root` user (with the `root` role, which etcd requires before it turns authentication on)
is the operator's, separate from herder's: `setup_access` runs as root (or a user with the root
role) and creates `root` with the administrator's password when authentication is still off,
then turns it on. Every step is idempotent; running it again puts back what drifted (extra
permissions or roles are revoked, the password set again) and reports what it did.
"""

from __future__ import annotations

from typing import Any

from herder.core import etcd
from herder.core.errors import HerderError

ROOT = "root"  # etcd's root user and role (fixed names)
READWRITE = "READWRITE"


def role_name(cluster: str) -> str:
    return f"herder-{cluster}"


def key_prefix(cluster: str) -> str:
    """Every key herder keeps for `cluster` starts with this."""
    return f"/herder/{cluster}/"


def _permission(cluster: str) -> dict[str, str]:
    prefix = key_prefix(cluster).encode()
    return {"permType": READWRITE, "key": etcd.b64(prefix),
            "range_end": etcd.b64(etcd.prefix_end(prefix))}


def _names(doc: dict[str, Any], field: str) -> list[str]:
    return [str(name) for name in doc.get(field, [])]


def authentication_on(admin: etcd.EtcdClient) -> bool:
    """Whether etcd's authentication is on: the administrator's client authenticates on its
    first request and holds no token ("") when it is off."""
    if admin.auth is None:
        raise HerderError("etcd setup needs the administrator's credentials")
    admin.call("/v3/auth/user/list", {})
    return admin.auth.token() != ""


def setup_access(admin: etcd.EtcdClient, cluster: str, user: str, password: str) -> list[str]:
    """Make herder's role and user for `cluster` as the module says; turn authentication on.
    Returns what was done, one line each."""
    if user == ROOT:
        raise HerderError("herder's etcd user must not be root: name another user in its client "
                          "settings (root stays the administrator's)")
    assert admin.auth is not None  # authentication_on insists
    done: list[str] = []
    was_on = authentication_on(admin)
    users = _names(admin.call("/v3/auth/user/list", {}), "users")
    if not was_on:
        done += _root_user(admin, users)
    done += _role(admin, cluster)
    done += _user(admin, cluster, user, password, exists=user in users)
    if not was_on:
        admin.call("/v3/auth/enable", {})
        admin.auth.invalidate()  # from now on requests need a token
        done.append("turned etcd's authentication on")
    return done


def _root_user(admin: etcd.EtcdClient, users: list[str]) -> list[str]:
    """etcd turns authentication on only with a `root` user holding the `root` role."""
    assert admin.auth is not None
    done = []
    if ROOT not in users:
        if admin.auth.user != ROOT:
            raise HerderError(f"etcd has no {ROOT} user yet and authentication is off: run the "
                              f"setup with {ROOT}'s settings (user = \"{ROOT}\"), whose "
                              "password it is created with")
        admin.call("/v3/auth/user/add", {"name": ROOT, "password": admin.auth.password})
        done.append(f"created etcd user {ROOT}")
    roles = _names(admin.call("/v3/auth/user/get", {"name": ROOT}), "roles")
    if ROOT not in roles:
        admin.call("/v3/auth/user/grant", {"user": ROOT, "role": ROOT})
        done.append(f"granted role {ROOT} to user {ROOT}")
    return done


def _role(admin: etcd.EtcdClient, cluster: str) -> list[str]:
    role = role_name(cluster)
    done = []
    if role not in _names(admin.call("/v3/auth/role/list", {}), "roles"):
        admin.call("/v3/auth/role/add", {"name": role})
        done.append(f"created etcd role {role}")
    wanted = _permission(cluster)
    present = False
    for perm in admin.call("/v3/auth/role/get", {"role": role}).get("perm", []):
        mine = (perm.get("permType", "READ") == READWRITE and perm.get("key") == wanted["key"]
                and perm.get("range_end", "") == wanted["range_end"])
        if mine:
            present = True
            continue
        admin.call("/v3/auth/role/revoke", {"role": role, "key": perm.get("key", ""),
                                            "range_end": perm.get("range_end", "")})
        done.append(f"revoked from role {role} a permission outside {key_prefix(cluster)}")
    if not present:
        admin.call("/v3/auth/role/grant", {"name": role, "perm": wanted})
        done.append(f"granted role {role} read-write on {key_prefix(cluster)}*")
    return done


def _user(admin: etcd.EtcdClient, cluster: str, user: str, password: str, *,
          exists: bool) -> list[str]:
    role = role_name(cluster)
    if exists:
        admin.call("/v3/auth/user/changepw", {"name": user, "password": password})
        done = [f"set the password of etcd user {user}"]
    else:
        admin.call("/v3/auth/user/add", {"name": user, "password": password})
        done = [f"created etcd user {user}"]
    roles = _names(admin.call("/v3/auth/user/get", {"name": user}), "roles")
    for other in roles:
        if other != role:
            admin.call("/v3/auth/user/revoke", {"name": user, "role": other})
            done.append(f"revoked role {other} from user {user}")
    if role not in roles:
        admin.call("/v3/auth/user/grant", {"user": user, "role": role})
        done.append(f"granted role {role} to user {user}")
    return done
