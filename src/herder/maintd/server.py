"""maintd's HTTP interface (design-maintd "External Reporting Protocol").

GET `/` -> `[1]`; `/1/status` -> the incidents (uuid, node, original, action, repair-status,
jobs, tag, ctime, mtime, serial_no); `/1/jobs` -> the running round's job ids; `/1/evacuated`;
herder extensions: `/1/reports` (the last diagnose observation per node, with errors),
`/1/overview` (all of it, for the page), `/1/backups` (the scheduled backups' schedules
and runs), `POST /1/cancel/<uuid>`, and the status page
`/status.html`, which fetches `/1/overview` every second (no reload).

Who may call what (`ROUTES`, docs/security.md): the reads are open to anyone; the plain HTTP
port serves nothing else. `POST /1/cancel/<uuid>` is for a RAPI user with the write option
(HTTP Basic against the RAPI users file: herder's `rapi_users`, or Ganeti's on a Ganeti
cluster) over HTTPS only: 403 over plain HTTP, 401 without valid credentials, 403 for a
read-only user, 503 when maintd has no users file; nothing is changed by a refused request.

Instance failure notifications (issue instmon; a herder extension to the design's GET-only
API): `POST /1/notifications` takes masakari's body (`herder.core.notification`) with the token
`X-Auth-Token: notification.token_for(<cluster HMAC key>)`, over HTTPS only (the plain port
answers 403 unless `insecure`), from the node it reports about (issue 35): the client shows its
node certificate, listed in the cluster's node certificates (`senders`), and the body's
`hostname` is that node; a failure of an instance it is not the primary of is refused (400).
400 bad body or not the sender's instance, 401 no or wrong token, 403 no or another node's
certificate, 409 the same notification again, else 202 with its verdict. `GET
/1/notifications`: the newest ones received.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from aiohttp import web

from herder.core import access, login_backoff, metrics, node_certs, notification
from herder.core.model import RepairStatus
from herder.core.rapi_users import REALM, UsersFile
from herder.maintd.daemon import Maintd

MAX_NOTIFICATION = 64 * 1024  # bytes
ROUTES = access.Routes("maintd")  # who may call each route (tests/security walks the router)


@dataclass
class NotifySettings:
    """How the routes that change something are checked (`POST /1/notifications`, `POST
    /1/cancel/<uuid>`)."""

    key: Callable[[], bytes | None]  # the cluster HMAC key (None: not readable)
    https_port: int = 0  # the HTTPS listener's port, named in the plain port's 403
    insecure: bool = False  # also accept notifications over plain HTTP
    users: UsersFile | None = None  # the RAPI users: who may cancel (write users, HTTPS)
    # wrong passwords lately, and the holds they set (`core.login_backoff`)
    backoff: login_backoff.Backoff = field(default_factory=login_backoff.Backoff)
    # the cluster's node certificates (digest -> node name: ssconf `herder_node_certs`) a
    # notification's sender must show; the function answers None for a cluster without them
    # (its nodes show none: the token alone, as before). None: maintd of a Ganeti cluster
    senders: Callable[[], Mapping[str, str] | None] | None = None


DAEMON = web.AppKey("maintd", Maintd)
NOTIFY = web.AppKey("maintd-notify", NotifySettings)


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(value), status=status, content_type="application/json")


def _d(request: web.Request) -> Maintd:
    return request.app[DAEMON]


@ROUTES.allow(access.ANYONE)
async def root(request: web.Request) -> web.Response:
    return _json([1])


@ROUTES.allow(access.ANYONE)
async def version(request: web.Request) -> web.Response:
    return _json(None)


@ROUTES.allow(access.ANYONE)
async def status(request: web.Request) -> web.Response:
    return _json(_d(request).status())


@ROUTES.allow(access.ANYONE)
async def jobs(request: web.Request) -> web.Response:
    return _json(list(_d(request).state.jobs))


@ROUTES.allow(access.ANYONE)
async def evacuated(request: web.Request) -> web.Response:
    return _json(list(_d(request).state.evacuated))


@ROUTES.allow(access.ANYONE)
async def reports(request: web.Request) -> web.Response:
    return _json(_d(request).reports())


@ROUTES.allow(access.ANYONE)
async def overview(request: web.Request) -> web.Response:
    return _json(_d(request).overview())


@ROUTES.allow(access.ANYONE)
async def prometheus(request: web.Request) -> web.Response:
    """maintd's incidents by status, the jobs it follows, its evacuated nodes and the nodes
    it has reports of, in Prometheus text (what `/1/overview` says, for scraping)."""
    daemon = _d(request)
    families = [
        metrics.counts("herder_maintd_incidents", "Incidents maintd tracks, by repair status",
                       "status", (i.repair_status for i in daemon.state.incidents),
                       every=get_args(RepairStatus)),
        metrics.Family("herder_maintd_jobs", "Jobs maintd follows",
                       samples=[((), float(len(daemon.state.jobs)))]),
        metrics.Family("herder_maintd_evacuated_nodes", "Nodes maintd evacuated",
                       samples=[((), float(len(daemon.state.evacuated)))]),
        metrics.Family("herder_maintd_reporting_nodes", "Nodes maintd has a report of",
                       samples=[((), float(len(daemon.observations)))]),
    ]
    return web.Response(body=metrics.exposition(families),
                        headers={"Content-Type": metrics.CONTENT_TYPE})


@ROUTES.allow(access.ANYONE)
async def backups(request: web.Request) -> web.Response:
    """The scheduled backups: the schedules and their runs (herder's; maintd.backups)."""
    return _json(_d(request).overview()["backups"])


def _writer_refusal(request: web.Request) -> web.Response | None:
    """Why this request may not change anything (None: it may): HTTPS and a RAPI write user."""
    settings = request.app.get(NOTIFY)
    if not request.secure:
        where = f"use the HTTPS port {settings.https_port}" if settings and settings.https_port \
            else "this maintd has no HTTPS listener (--notify-port)"
        return _json({"error": "forbidden", "message": f"changes over plain HTTP are refused: "
                      f"{where} with a RAPI user that may write"}, 403)
    if settings is None or settings.users is None:
        return _json({"error": "unavailable", "message": "this maintd has no RAPI users file "
                      "to check the credentials with"}, 503)
    tried = login_backoff.attempt_basic(settings.users, settings.backoff,
                                        request.headers.get("Authorization"),
                                        request.remote or "?", "maintd cancel")
    if tried.hold > 0:
        return web.Response(text=json.dumps({
            "error": "too many requests", "message": "too many wrong passwords from this "
            f"address for this user; try again in {tried.hold:.1f} s"}), status=429,
            content_type="application/json",
            headers={"Retry-After": login_backoff.retry_after(tried.hold)})
    user = tried.user
    if user is None:
        return web.Response(text=json.dumps({"error": "unauthorized", "message": "valid RAPI "
                                             "credentials are required"}),
                            status=401, content_type="application/json",
                            headers={"WWW-Authenticate": f'Basic realm="{REALM}"'})
    if not user.can_write:
        return _json({"error": "forbidden", "message": f"user {user.name} may not make "
                      "changes"}, 403)
    return None


@ROUTES.allow(access.RAPI_WRITE)
async def cancel(request: web.Request) -> web.Response:
    refusal = _writer_refusal(request)
    if refusal is not None:
        return refusal
    event = request.match_info["uuid"]
    try:
        inc = await _d(request).cancel(event)
    except KeyError:
        return _json({"error": "not found", "message": f"no incident {event}"}, 404)
    return _json({"uuid": inc.uuid, "repair-status": inc.repair_status})


@ROUTES.allow(access.ANYONE)
async def notifications(request: web.Request) -> web.Response:
    return _json(_d(request).notifications())


@ROUTES.allow(access.NOTIFICATION)
async def notify(request: web.Request) -> web.Response:
    settings = request.app.get(NOTIFY)
    if settings is None:
        return _json({"error": "unavailable", "message": "this maintd takes no notifications"},
                     503)
    if not request.secure and not settings.insecure:
        where = f"use the HTTPS port {settings.https_port}" if settings.https_port else \
            "this maintd has no HTTPS listener (--notify-port)"
        return _json({"error": "forbidden", "message": f"notifications over plain HTTP are "
                      f"refused: {where}"}, 403)
    key = settings.key()
    if key is None:
        return _json({"error": "unavailable", "message": "maintd cannot read the cluster HMAC "
                      "key to check the token"}, 503)
    token = request.headers.get(notification.TOKEN_HEADER)
    if not token:
        return _json({"error": "unauthorized", "message": f"no {notification.TOKEN_HEADER} header"},
                     401)
    if not hmac.compare_digest(token.encode(), notification.token_for(key).encode()):
        return _json({"error": "unauthorized",
                      "message": f"wrong {notification.TOKEN_HEADER} (not the "
                      "cluster's notification token)"}, 401)
    if request.content_length is not None and request.content_length > MAX_NOTIFICATION:
        return _json({"error": "bad request", "message": "body too large"}, 413)
    body = await request.read()
    try:
        note = notification.parse(body)
    except notification.NotificationError as err:
        return _json({"error": "bad request", "message": str(err)}, 400)
    refused = _sender_refusal(request, settings, note)
    if refused is not None:
        return _json({"error": "forbidden", "message": refused}, 403)
    code, answer = await _d(request).notify(note)
    return _json(answer, code)


def _sender_refusal(request: web.Request, settings: NotifySettings,
                    note: notification.Notification) -> str | None:
    """Why this notification does not come from the node it names (None: it does, or the
    cluster binds none). The client's node certificate must be listed, and its node the
    body's `hostname`. Over plain HTTP (`insecure`, tests) nothing can be bound."""
    listed = settings.senders() if settings.senders is not None else None
    if listed is None or not request.secure:
        return None
    tls = request.transport.get_extra_info("ssl_object") if request.transport else None
    shown = tls.getpeercert(binary_form=True) if tls is not None else None
    if not shown:
        return "a notification must come with the sending node's node certificate"
    sender = listed.get(node_certs.digest_der(shown))
    if sender is None:
        return ("the client certificate is not one of the cluster's node certificates "
                "(revoked or unknown)")
    if note.hostname != sender:
        return f"node {sender} may not report for {note.hostname}"
    return None


@ROUTES.allow(access.ANYONE)
async def page(request: web.Request) -> web.Response:
    return web.Response(text=STATUS_PAGE, content_type="text/html")


@ROUTES.allow(access.ANYONE)
async def not_found(request: web.Request) -> web.Response:
    return _json({"error": "not found", "message": "Resource not found"}, 404)


def make_app(daemon: Maintd, notify_settings: NotifySettings | None = None) -> web.Application:
    app = web.Application(client_max_size=MAX_NOTIFICATION)
    app[DAEMON] = daemon
    if notify_settings is not None:
        app[NOTIFY] = notify_settings
    app.router.add_get("/", root)
    app.router.add_get("/1", version)
    app.router.add_get("/1/", version)
    app.router.add_get("/1/status", status)
    app.router.add_get("/1/jobs", jobs)
    app.router.add_get("/1/evacuated", evacuated)
    app.router.add_get("/1/reports", reports)
    app.router.add_get("/1/overview", overview)
    app.router.add_get("/metrics", prometheus)
    app.router.add_get("/1/backups", backups)
    app.router.add_post("/1/cancel/{uuid}", cancel)
    app.router.add_get("/1/notifications", notifications)
    app.router.add_post("/1/notifications", notify)
    app.router.add_get("/status.html", page)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


STATUS_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>herder maintd</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border:1px solid #bbb;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#eee} code{font-size:90%}
.noted{color:#a60}.pending{color:#06c}.completed{color:#080}.failed{color:#c00}
.canceled{color:#777}.err{color:#c00}
</style></head><body>
<h1>herder maintd</h1>
<p id="summary">loading&hellip;</p>
<h2>Incidents</h2>
<p id="cancelhow">Canceling an incident needs this page over HTTPS (the notification port) and
a RAPI user that may write, or <code>herder maintd cancel UUID</code>.</p>
<table id="incidents"><thead><tr><th>uuid</th><th>node</th><th>action</th>
<th>repair-status</th><th>jobs</th><th>tag</th><th>details</th><th></th></tr></thead>
<tbody></tbody></table>
<h2>Node reports</h2>
<table id="reports"><thead><tr><th>node</th><th>status</th><th>state</th><th>error</th>
</tr></thead><tbody></tbody></table>
<h2>Notifications</h2>
<table id="notifications"><thead><tr><th>received</th><th>from</th><th>instance</th>
<th>event</th><th>status</th><th>reason</th></tr></thead><tbody></tbody></table>
<h2>Node failures</h2><p id="nodefail"></p><ul id="nodefailnotes"></ul>
<h2>Scheduled backups</h2>
<table id="backups"><thead><tr><th>run</th><th>schedule</th><th>instance</th><th>to</th>
<th>status</th><th>jobs</th><th>started</th><th>ended</th><th>error</th></tr></thead>
<tbody></tbody></table>
<h2>Notes</h2><ul id="notes"></ul>
<script>
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;',
'"':'&quot;'}[c]));}
const secure=location.protocol==='https:';
async function cancelIncident(id){const r=await fetch('/1/cancel/'+id,{method:'POST'});
if(!r.ok){alert('cancel refused: '+((await r.json()).message||r.status));}refresh();}
async function refresh(){
  let o;
  try{o=await (await fetch('/1/overview',{cache:'no-store'})).json();}
  catch(e){document.getElementById('summary').textContent='maintd unreachable: '+e;return;}
  document.getElementById('summary').innerHTML='round '+o.rounds+'; running jobs: '+
    (o.jobs.length?o.jobs.join(', '):'none')+(o.error?' <span class="err">'+esc(o.error)+
    '</span>':'');
  const names=Object.assign({},o.node_names||{});o.reports.forEach(r=>names[r.node]=r.name);
  document.querySelector('#incidents tbody').innerHTML=o.incidents.map(i=>
    '<tr id="inc-'+esc(i.uuid)+'"><td><code>'+esc(i.uuid)+'</code></td><td>'+
    esc(names[i.node]||i.node)+'</td><td>'+esc(i.action)+(i.instance?' instance <code>'+
    esc(i.instance)+'</code>':'')+'</td><td class="status '+
    esc(i['repair-status'])+'">'+esc(i['repair-status'])+'</td><td>'+esc(i.jobs.join(', '))+
    '</td><td><code>'+esc(i.tag)+'</code></td><td><code>'+esc(JSON.stringify(i.original))+
    '</code></td><td>'+(secure&&['noted','pending'].includes(i['repair-status'])?
    '<button onclick="cancelIncident(\\''+esc(i.uuid)+'\\')">cancel</button>':'')+
    '</td></tr>').join('');
  document.querySelector('#reports tbody').innerHTML=o.reports.map(r=>
    '<tr><td>'+esc(r.name)+'</td><td>'+esc(r.data&&r.data.status!==undefined?r.data.status:
    '-')+'</td><td>'+(r.offline?'offline':r.drained?'drained':'online')+
    '</td><td class="err">'+esc(r.error||'')+'</td></tr>').join('');
  document.querySelector('#notifications tbody').innerHTML=(o.notifications||[]).slice()
    .reverse().map(n=>'<tr><td>'+esc(n.generated_time)+'</td><td>'+esc(n.hostname)+
    '</td><td><code>'+esc(n.payload.instance_uuid||'')+'</code></td><td>'+
    esc((n.payload.event||'')+'/'+(n.payload.vir_domain_event||''))+'</td><td>'+
    esc(n.status)+'</td><td>'+esc(n.reason)+'</td></tr>').join('');
  const utc=t=>t?new Date(t*1000).toISOString().slice(0,19).replace('T',' '):'-';
  document.querySelector('#backups tbody').innerHTML=((o.backups||{}).runs||[]).slice()
    .reverse().map(b=>'<tr><td><code>'+esc(b.uuid)+'</code></td><td>'+esc(b.schedule)+
    '</td><td>'+esc(b.instance)+'</td><td>'+esc(b.targetNode)+'</td><td class="'+
    esc(b.status)+'">'+esc(b.status)+'</td><td>'+esc(b.jobs.join(', '))+'</td><td>'+
    utc(b.start)+'</td><td>'+utc(b.end)+'</td><td class="err">'+esc(b.error)+'</td></tr>')
    .join('');
  document.getElementById('notes').innerHTML=o.notes.map(n=>'<li>'+esc(n)+'</li>').join('');
  const nf=o.node_failures||{state:'unknown',notes:[]};
  document.getElementById('nodefail').textContent='detection and recovery of dead nodes: '+
    nf.state;
  document.getElementById('nodefailnotes').innerHTML=nf.notes.map(n=>'<li>'+esc(n)+'</li>')
    .join('');
}
if(secure){document.getElementById('cancelhow').hidden=true;}
refresh();setInterval(refresh,1000);
</script></body></html>
"""
