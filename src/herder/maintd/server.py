"""maintd's HTTP interface (design-maintd "External Reporting Protocol").

GET `/` -> `[1]`; `/1/status` -> the incidents (uuid, node, original, action, repair-status,
jobs, tag, ctime, mtime, serial_no); `/1/jobs` -> the running round's job ids; `/1/evacuated`;
herder extensions: `/1/reports` (the last diagnose observation per node, with errors),
`/1/overview` (all of it, for the page), `POST /1/cancel/<uuid>`, and the status page
`/status.html`, which fetches `/1/overview` every second (no reload).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from herder.maintd.daemon import Maintd

DAEMON = web.AppKey("maintd", Maintd)


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(value), status=status, content_type="application/json")


def _d(request: web.Request) -> Maintd:
    return request.app[DAEMON]


async def root(request: web.Request) -> web.Response:
    return _json([1])


async def version(request: web.Request) -> web.Response:
    return _json(None)


async def status(request: web.Request) -> web.Response:
    return _json(_d(request).status())


async def jobs(request: web.Request) -> web.Response:
    return _json(list(_d(request).state.jobs))


async def evacuated(request: web.Request) -> web.Response:
    return _json(list(_d(request).state.evacuated))


async def reports(request: web.Request) -> web.Response:
    return _json(_d(request).reports())


async def overview(request: web.Request) -> web.Response:
    return _json(_d(request).overview())


async def cancel(request: web.Request) -> web.Response:
    event = request.match_info["uuid"]
    try:
        inc = await _d(request).cancel(event)
    except KeyError:
        return _json({"error": "not found", "message": f"no incident {event}"}, 404)
    return _json({"uuid": inc.uuid, "repair-status": inc.repair_status})


async def page(request: web.Request) -> web.Response:
    return web.Response(text=STATUS_PAGE, content_type="text/html")


async def not_found(request: web.Request) -> web.Response:
    return _json({"error": "not found", "message": "Resource not found"}, 404)


def make_app(daemon: Maintd) -> web.Application:
    app = web.Application()
    app[DAEMON] = daemon
    app.router.add_get("/", root)
    app.router.add_get("/1", version)
    app.router.add_get("/1/", version)
    app.router.add_get("/1/status", status)
    app.router.add_get("/1/jobs", jobs)
    app.router.add_get("/1/evacuated", evacuated)
    app.router.add_get("/1/reports", reports)
    app.router.add_get("/1/overview", overview)
    app.router.add_post("/1/cancel/{uuid}", cancel)
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
<table id="incidents"><thead><tr><th>uuid</th><th>node</th><th>action</th>
<th>repair-status</th><th>jobs</th><th>tag</th><th>details</th><th></th></tr></thead>
<tbody></tbody></table>
<h2>Node reports</h2>
<table id="reports"><thead><tr><th>node</th><th>status</th><th>state</th><th>error</th>
</tr></thead><tbody></tbody></table>
<h2>Notes</h2><ul id="notes"></ul>
<script>
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;',
'"':'&quot;'}[c]));}
async function cancelIncident(id){await fetch('/1/cancel/'+id,{method:'POST'});refresh();}
async function refresh(){
  let o;
  try{o=await (await fetch('/1/overview',{cache:'no-store'})).json();}
  catch(e){document.getElementById('summary').textContent='maintd unreachable: '+e;return;}
  document.getElementById('summary').innerHTML='round '+o.rounds+'; running jobs: '+
    (o.jobs.length?o.jobs.join(', '):'none')+(o.error?' <span class="err">'+esc(o.error)+
    '</span>':'');
  const names={};o.reports.forEach(r=>names[r.node]=r.name);
  document.querySelector('#incidents tbody').innerHTML=o.incidents.map(i=>
    '<tr id="inc-'+esc(i.uuid)+'"><td><code>'+esc(i.uuid)+'</code></td><td>'+
    esc(names[i.node]||i.node)+'</td><td>'+esc(i.action)+'</td><td class="status '+
    esc(i['repair-status'])+'">'+esc(i['repair-status'])+'</td><td>'+esc(i.jobs.join(', '))+
    '</td><td><code>'+esc(i.tag)+'</code></td><td><code>'+esc(JSON.stringify(i.original))+
    '</code></td><td>'+(['noted','pending'].includes(i['repair-status'])?
    '<button onclick="cancelIncident(\\''+esc(i.uuid)+'\\')">cancel</button>':'')+
    '</td></tr>').join('');
  document.querySelector('#reports tbody').innerHTML=o.reports.map(r=>
    '<tr><td>'+esc(r.name)+'</td><td>'+esc(r.data&&r.data.status!==undefined?r.data.status:
    '-')+'</td><td>'+(r.offline?'offline':r.drained?'drained':'online')+
    '</td><td class="err">'+esc(r.error||'')+'</td></tr>').join('');
  document.getElementById('notes').innerHTML=o.notes.map(n=>'<li>'+esc(n)+'</li>').join('');
}
refresh();setInterval(refresh,1000);
</script></body></html>
"""
