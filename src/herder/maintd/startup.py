"""Starting maintd (`herder maintd`): its settings, the master check, the cluster it maintains
(herder's masterd, or a Ganeti cluster through its RAPI), the daemon and its two listeners.

`run(settings)` (`herder.maintd.settings`) refuses to start on a node that is not the master
(`NotMaster`: the CLI exits with code 11), then serves through `core.serve` until SIGTERM or
SIGINT: HTTP on `port` (reads: status, status page) and, unless `notify_port` is 0, HTTPS with
the cluster certificate on `notify_port`: the same reads, instmon's notifications and the
incidents' cancel (RAPI write users, `maintd.server`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from herder.core import cluster_secrets, confd, envelope, node_certs, notification, serve, ssconf
from herder.core.cluster_secrets import CERT_FILE, HMAC_KEY_FILE, RAPI_USERS_FILE
from herder.core.errors import HerderError
from herder.core.rapi import RapiClient
from herder.core.rapi_users import UsersFile
from herder.core.store import ConfigStore, FileStore, is_etcd_location, open_store
from herder.maintd import etcd_master
from herder.maintd.agents import AgentPoller
from herder.maintd.daemon import Maintd, RapiCluster
from herder.maintd.server import ROUTES, NotifySettings, make_app
from herder.maintd.settings import GANETI_DATA, GANETI_STATE, MaintdSettings, NotMaster
from herder.maintd.sources import DiagnoseSource
from herder.maintd.state import FileState, RapiState, StateStore

if TYPE_CHECKING:
    from herder.core.store_etcd import EtcdStore

log = logging.getLogger("herder.maintd")

@dataclass
class Prepared:
    """A maintd ready to serve: the daemon, where it listens, how notifications are checked."""

    daemon: Maintd
    bind: str
    notify: NotifySettings
    tls: ssl.SSLContext | None  # of the HTTPS listener (None: none)
    agents: AgentPoller
    me: str = ""
    etcd: EtcdStore | None = None  # etcd backend: the master lease decides (maintd.etcd_master)
    deposed: str | None = None  # why maintd stopped serving as the master's (exit code 11)

    def depose(self, reason: str) -> None:
        if self.deposed is None:
            self.deposed = reason
            log.error("no longer the master: %s; stopping", reason)


def prepare(settings: MaintdSettings) -> Prepared:
    """Everything before listening: the failure table, the cluster, the master check, the
    state, the daemon. HerderError (one line) or NotMaster when it cannot run here."""
    recovery = notification.load_recovery(settings.failure_table)
    me = settings.node_name or socket.getfqdn()
    bind = settings.bind
    maint: dict[str, Any] = {}
    etcd: EtcdStore | None = None  # Ganeti's cluster and a config file: no master lease
    cluster: Any
    senders: Callable[[], Mapping[str, str] | None] | None = None  # Ganeti's nodes show none
    if settings.ganeti_rapi:
        from herder.maintd.ganeti import GanetiCluster, repair_via_mond

        client = ganeti_client(settings.ganeti_rapi, settings.rapi_user,
                               settings.rapi_password_file, settings.rapi_ca)
        try:
            info = client.get_info()
            nodes = client.get_nodes(bulk=True)
        except Exception as err:
            raise HerderError(f"cannot ask Ganeti's RAPI at {settings.ganeti_rapi}: "
                              f"{_rapi_problem(err, settings.rapi_user)}") from None
        master = info.get("master")
        if master != me:
            raise NotMaster(f"this node ({me}) is not the master ({master})")
        if bind is None:
            bind = next((n.get("pip") for n in nodes if n.get("name") == me), None) or "0.0.0.0"
        key_path = settings.hmac_key or Path(GANETI_DATA) / "hmac.key"
        cert = settings.cert_file or Path(GANETI_DATA) / "server.pem"
        users_path = settings.rapi_users or Path(GANETI_DATA) / "rapi" / "users"
        state: StateStore = FileState(settings.state_file or Path(GANETI_STATE))
    else:
        store = config_store(settings)
        etcd = lease_store(store)
        problem = local_master_problem(store, me)  # before asking anybody
        if problem is None and etcd is not None:
            problem = etcd_master.not_master(etcd.client, etcd.cluster, me)
        if problem is not None:
            raise NotMaster(problem)
        client = RapiClient.for_herder_cluster(store.directory, settings.masterd_url)
        try:
            info = client.get_info()
            master = info.get("master")
            maint = client.get_herder("maintenance")
            nodes = client.get_nodes(bulk=True)
        except Exception as err:
            raise HerderError(f"cannot ask masterd: {err}") from None
        voted = master_vote(store, me) if etcd is None else None  # etcd: the lease voted
        if voted is not None:
            master = voted
        if master != me:
            raise NotMaster(f"this node ({me}) is not the master ({master})")
        if bind is None:
            cluster_ip = store.load().cluster.master_ip if store.exists() else None
            master_pip = next((n.get("pip") for n in nodes if n.get("name") == me), None)
            bind = _bindable(cluster_ip) or master_pip or "0.0.0.0"
        key_path = settings.hmac_key or store.directory / HMAC_KEY_FILE
        cert = settings.cert_file or store.directory / CERT_FILE
        users_path = settings.rapi_users or store.directory / RAPI_USERS_FILE
        senders = node_certificates(store.directory)
        if settings.state_file is not None:
            state = FileState(settings.state_file)
        else:
            state = RapiState(client, FileState(store.directory / "maintd-state.json"))

    def key() -> bytes | None:
        try:
            return envelope.load_key(key_path)
        except (OSError, ValueError):
            return None

    if settings.ganeti_rapi:
        cluster = GanetiCluster(client, repair=repair_via_mond(key, settings.mond_port))
    else:
        cluster = RapiCluster(client)
    delay = (float(maint.get("roundDelay", 300)) if settings.round_delay is None
             else settings.round_delay)
    agents = AgentPoller(port=settings.mond_port)
    daemon = Maintd(cluster, state, [DiagnoseSource(key)], agents=agents,
                    round_delay=delay, interval=settings.poll_interval,
                    enabled=bool(maint.get("enabled", True)),
                    harep=settings.harep or bool(maint.get("harep", False)),
                    watcher=(not settings.ganeti_rapi) if settings.watcher is None
                    else settings.watcher,
                    failure_table=recovery.failures, failure_window=settings.failure_window,
                    recovery=recovery, node_recovery=settings.node_recovery,
                    node_failure_time=settings.node_failure_time)
    tls = None
    if settings.notify_port:  # the nodes show their node certificates (of the cluster CA)
        authorities = [] if senders is None else \
            [path for path in (cert, cluster_secrets.retiring(cert)) if path.is_file()]
        tls = serve.server_tls(cert, purpose=" for the notification port",
                               hint=" (--notify-port 0 disables it)", client_cas=authorities,
                               clients_optional=True)
    notify = NotifySettings(key, https_port=settings.notify_port,
                            insecure=settings.notify_insecure, users=UsersFile(users_path),
                            senders=senders)
    return Prepared(daemon, bind, notify, tls, agents, me=me, etcd=etcd)


def config_store(settings: MaintdSettings) -> ConfigStore:
    """The cluster's config store; on etcd with the secrets in `local_dir` (refused for a
    config file, whose secrets are beside it)."""
    if settings.local_dir is None:
        return open_store(settings.config_path)
    location = settings.config_path if settings.config_path is not None else \
        os.environ.get("HERDER_CONFIG")
    if not is_etcd_location(None if location is None else str(location)):
        raise HerderError("--local-dir is for a config in etcd (etcds://...); a config file's "
                          "secrets are beside it")
    from herder.core.store_etcd import EtcdStore  # only when used (keeps httpx out)

    return EtcdStore.from_location(str(location), local_dir=settings.local_dir)


def lease_store(store: ConfigStore) -> EtcdStore | None:
    """The etcd store, whose master lease decides where maintd runs; None for a file."""
    if isinstance(store, FileStore):
        return None
    from herder.core.store_etcd import EtcdStore  # only when used (keeps httpx out)

    return store if isinstance(store, EtcdStore) else None


def node_certificates(directory: Path) -> Callable[[], Mapping[str, str] | None]:
    """The cluster's node certificates as the nodes have them (ssconf `herder_node_certs`,
    read at each notification: `node remove` takes one out): digest -> node name; None for a
    cluster without them (no list, or an empty one: its nodes show no certificate)."""
    def listed() -> Mapping[str, str] | None:
        text = ssconf.read(node_certs.SSCONF_NAME, directory)
        return (node_certs.parse_list(text) or None) if text is not None else None

    return listed


async def serve_maintd(settings: MaintdSettings, prepared: Prepared,
                       say: Callable[[str], None], stop: asyncio.Event | None = None) -> None:
    """Serve until `stop` is set; `say` prints the lines the operator (and the simulator)
    waits for."""
    bind, notify = prepared.bind, prepared.notify
    listeners = [serve.Listener(bind, settings.port)]
    if prepared.tls is not None:
        listeners.append(serve.Listener(bind, settings.notify_port, tls=prepared.tls,
                                        what=" (--notify-port)"))

    def ready(bound: list[serve.Address]) -> None:
        plain = next(a.port for a in bound if not a.secure)
        say(f"herder maintd: listening on http://{bind}:{plain}/ "
            f"(status page http://{bind}:{plain}/status.html)")
        secure = [a.port for a in bound if a.secure]
        if secure:
            notify.https_port = secure[0]
            say(f"herder maintd: notifications: listening on "
                f"https://{bind}:{notify.https_port}/1/notifications")

    daemon = prepared.daemon
    tasks: list[serve.Task] = [lambda stop: daemon.run()]
    stop_serving = stop or asyncio.Event()
    etcd = prepared.etcd
    if etcd is not None:
        def deposed(reason: str) -> None:
            prepared.depose(reason)
            stop_serving.set()

        tasks.append(lambda stop: etcd_master.watch_master(etcd, prepared.me, deposed, stop))
    await serve.serve("maintd", settings.run_dir,
                      endpoints=[serve.Http(make_app(daemon, notify), listeners,
                                            routes=ROUTES)],
                      tasks=tasks, on_start=[daemon.start],
                      on_stop=[prepared.agents.close], ready=ready, stop=stop_serving)


def run(settings: MaintdSettings, say: Callable[[str], None]) -> None:
    """Check, prepare and serve maintd until SIGTERM/SIGINT (NotMaster, HerderError)."""
    prepared = prepare(settings)
    serve.run(lambda stop: serve_maintd(settings, prepared, say, stop))
    if prepared.deposed is not None:
        raise NotMaster(prepared.deposed)


def ganeti_client(url: str, user: str, password_file: Path | None,
                  ca: Path | None) -> RapiClient:
    """A RAPI client for a Ganeti cluster: its users file's credentials, its pinned
    certificate (the host name is not checked: Ganeti's certificate names the cluster)."""
    if password_file is None:
        raise HerderError("--ganeti-rapi needs --rapi-password-file (the RAPI user's password)")
    try:
        password = password_file.read_text().strip()
    except OSError as err:
        raise HerderError(f"cannot read {password_file}: {err.strerror}") from None
    if ca is None and Path(GANETI_DATA, "rapi.pem").is_file():
        ca = Path(GANETI_DATA, "rapi.pem")
    verify: Any = str(ca) if ca is not None else True
    if ca is not None and not ca.is_file():
        raise HerderError(f"RAPI certificate {ca} does not exist")
    return RapiClient(url, user, password, verify=verify, check_hostname=ca is None,
                      timeout=60.0)


def _rapi_problem(err: Exception, user: str) -> str:
    status = getattr(err, "status", None)
    if status in (401, 403):
        return (f"the credentials of RAPI user {user!r} were refused ({status}); check "
                "--rapi-user and --rapi-password-file against Ganeti's rapi/users file")
    return str(err)


def _bindable(address: str | None) -> str | None:
    if not address:
        return None
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
    except OSError:
        return None
    return address


def local_master_problem(store: ConfigStore, me: str) -> str | None:
    """Why this node's own view already rules it out as the master, so maintd stops (exit 11)
    without asking masterd, which may be down: no config here (only the master and the master
    candidates have one), or a config naming another master. None: ask masterd and the vote."""
    if isinstance(store, FileStore) and not store.exists():
        return f"no cluster config at {store.path} (the master and the master candidates have one)"
    config = store.load()
    try:
        node = config.find_node(me)
    except HerderError:  # not a node of this cluster (tests on one machine): the vote decides
        return None
    if node.uuid != config.cluster.master_node:
        return (f"this node ({node.name}) is not the master "
                f"({config.node_name(config.cluster.master_node)})")
    return None


def master_vote(store: ConfigStore, me: str) -> str | None:
    """Ask the master candidates' confd who the master is; a majority of the candidates must
    name the same node. None when no confd answers (then masterd's own answer is used)."""
    if not store.exists():
        return None
    config = store.load()
    peers = confd.peers_from_config(config)
    try:
        client = confd.ConfdClient(peers, envelope.load_key(store.directory / HMAC_KEY_FILE),
                                   timeout=2.0)
        result = client.query(confd.REQ_CLUSTER_MASTER, None, coverage=-1)
    except Exception as err:  # no confd anywhere: fall back to masterd
        log.warning("master vote: no confd answered (%s); trusting masterd", err)
        return None
    votes: dict[str, int] = {}
    for reply in result.replies.values():
        if reply.status == 0 and isinstance(reply.answer, str):
            votes[reply.answer] = votes.get(reply.answer, 0) + 1
    winner, count = max(votes.items(), key=lambda kv: kv[1], default=(None, 0))
    if winner is None or count * 2 <= len(peers):
        raise HerderError(f"master vote: no majority of the {len(peers)} master candidates "
                          f"agrees on a master ({votes or 'no answers'})")
    if winner != me:
        log.warning("master vote: %d of %d master candidates name %s", count, len(peers), winner)
    return winner
