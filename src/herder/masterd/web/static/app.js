// herder's web console: one page, its views are #/... fragments. It reads RAPI (Ganeti's
// routes and herder's /2/herder/ twins of each view) and acts only through RAPI's write
// routes, each an ordinary job; the session cookie authenticates, the CSRF token goes in the
// X-Herder-CSRF header of every change. Live updates: server-sent events (/2/herder/events).
import { openSerial, openVnc, showLog } from "./console.js";

const state = { me: null, view: null, refresh: null, lastRefresh: 0, overviewStream: null };

// --- small helpers ---------------------------------------------------------------------------

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const enc = encodeURIComponent;
const mib = (v) => (v === null || v === undefined ? "–" : v >= 1024 ? `${(v / 1024).toFixed(1)} GiB` : `${v} MiB`);
const ROLES = { M: "master", C: "master-candidate", R: "regular", D: "drained", O: "offline" };
const shown = (v) => (typeof v === "boolean" ? (v ? "yes" : "no") : v);
const rate = (v) => (v >= 1048576 ? `${(v / 1048576).toFixed(1)} MiB/s` : `${(v / 1024).toFixed(1)} KiB/s`);
const when = (ts) => (Array.isArray(ts) && ts[0] ? new Date(ts[0] * 1000).toLocaleTimeString() : "");

function usage(used, total) {
  if (total === null || total === undefined || used === null || used === undefined) return "–";
  const pct = total ? Math.round((100 * used) / total) : 0;
  return h("span", { class: "usage", title: `${pct}%` },
    h("span", { class: "bar" }, h("span", { style: `width:${pct}%` })), `${mib(used)} / ${mib(total)}`);
}

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export async function api(path, { method = "GET", body, query } = {}) {
  const url = query ? `${path}?${new URLSearchParams(query)}` : path;
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-Herder-CSRF"] = state.me ? state.me.csrf : "";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, { method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  let value = null;
  try { value = text ? JSON.parse(text) : null; } catch { value = text; }
  if (response.status === 401 && state.me) {
    location.href = "/ui/login?why=ended";
    throw new ApiError(401, "your session has ended; log in again");
  }
  if (!response.ok) {
    const explain = value && value.explain ? value.explain : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, explain);
  }
  return value;
}

function banner(text, kind = "error") {
  const el = document.getElementById("banner");
  el.textContent = text;
  el.className = kind === "error" ? "" : "info";
  el.hidden = !text;
}

function confirmAction(text, extra) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  const slot = document.getElementById("confirm-extra");
  slot.replaceChildren(...(extra ? [extra] : []));
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

// --- jobs: submitted actions and their progress ----------------------------------------------

function jobLog(entries, into) {
  for (const [, ts, , message] of entries) {
    const text = typeof message === "string" ? message : JSON.stringify(message);
    into.append(h("li", {}, `${when(ts)} ${text}`));
  }
}

function jobResult(info) {
  if (info.status === "success") return JSON.stringify(info.opresult);
  const errors = (info.opresult || []).filter((r) => r !== null);
  return errors.map((r) => (Array.isArray(r) ? r.flat(3).join(": ") : JSON.stringify(r))).join("; ");
}

// Polls a job until it ends (for short read jobs whose result the page shows).
async function jobOutcome(jobId, tries = 240) {
  let job = null;
  for (let i = 0; i < tries; i++) {
    job = await api(`/2/jobs/${jobId}`);
    if (["success", "error", "canceled"].includes(job.status)) return job;
    await new Promise((r) => setTimeout(r, 500));
  }
  return job;
}

// Follows a job through the events stream: status, log messages as they come, the result.
export function followJob(jobId, container, onEnd) {
  const status = h("strong", { class: "job-status" }, "submitted");
  const log = h("ul", { class: "job-log" });
  const result = h("div", { class: "job-result" });
  const cancel = h("button", { class: "writer job-cancel", onclick: async () => {
    if (!(await confirmAction(`Cancel job ${jobId}?`))) return;
    try {
      const [ok, message] = await api(`/2/jobs/${jobId}`, { method: "DELETE" });
      banner(message, ok ? "info" : "error");
    } catch (err) { banner(`cancel of job ${jobId} refused: ${err.message}`); }
  } }, "Cancel");
  const panel = h("div", { class: "job-panel", "data-job": jobId },
    h("a", { href: `#/job/${jobId}` }, `Job ${jobId}`), " ", status, " ", cancel, log, result);
  container.prepend(panel);
  const source = new EventSource(`/2/herder/events?job=${jobId}`);
  source.addEventListener("job", (event) => {
    const { job_info: info, log_entries: entries } = JSON.parse(event.data);
    status.textContent = info.status;
    status.className = `job-status status-${info.status}`;
    jobLog(entries, log);
    if (["success", "error", "canceled"].includes(info.status)) {
      cancel.remove();
      result.textContent = info.status === "success" ? `Result: ${jobResult(info)}` : `Failed: ${jobResult(info)}`;
      result.className = `job-result status-${info.status}`;
    }
  });
  source.addEventListener("end", () => { source.close(); if (onEnd) onEnd(); });
  // the session or the user went (docs/security.md "Streams"): no reconnection
  source.addEventListener("ended", (event) => {
    source.close();
    status.textContent += ` (${JSON.parse(event.data).reason})`;
  });
  source.onerror = () => { if (source.readyState === EventSource.CLOSED) status.textContent += " (stream lost)"; };
  return panel;
}

// A write action: confirmation, the RAPI request, then the job's progress in `jobsArea`.
async function act({ label, method, path, body, query, confirm = true, extra, jobsArea }) {
  if (confirm && !(await confirmAction(`${label}?`, extra ? extra.node : null))) return;
  const payload = extra ? extra.body() : body;
  try {
    const jobId = await api(typeof path === "function" ? path() : path, { method, body: payload, query });
    banner(`${label}: job ${jobId} submitted`, "info");
    followJob(jobId, jobsArea, () => refreshSoon(0));
  } catch (err) {
    banner(`${label} refused: ${err.message}`);
  }
}

function actionButton(spec) {
  return h("button", { class: `writer${spec.danger ? " danger" : ""}`, "data-action": spec.id,
    onclick: () => act(spec) }, spec.label);
}

// --- views -------------------------------------------------------------------------------------

function nodeRows(nodes) {
  return nodes.map((n) => h("tr", { "data-node": n.name },
    h("td", { "data-label": "Node" }, h("a", { href: `#/node/${enc(n.name)}` }, n.name)),
    h("td", { "data-label": "Role" }, n.role),
    h("td", { "data-label": "State", class: n.state === "online" ? "ok" : "warn" }, n.state),
    h("td", { "data-label": "Memory", class: "mem" }, usage(n.mtotal === null ? null : n.mtotal - n.mfree, n.mtotal)),
    h("td", { "data-label": "Disk", class: "disk" }, usage(n.dtotal === null ? null : n.dtotal - n.dfree, n.dtotal)),
    h("td", { "data-label": "CPUs", class: "cpu" }, n.ctotal ?? "–"),
    h("td", { "data-label": "Instances" }, `${n.pinst_cnt} / ${n.sinst_cnt}`),
    h("td", { "data-label": "Health", class: `health ${n.live_error || n.incidents.length || (n.diagnose && n.diagnose !== "Ok") || Object.keys(n.daemons_bad || {}).length ? "bad" : "ok"}` },
      n.live_error ? `unreachable: ${n.live_error}` : "",
      n.diagnose ? `diagnose ${n.diagnose}` : (n.diagnose_error ? `diagnose: ${n.diagnose_error}` : ""),
      n.daemons_bad === null || n.daemons_bad === undefined ? ""
        : Object.keys(n.daemons_bad).length ? Object.entries(n.daemons_bad).map(([d, m]) => ` daemon ${d}: ${m}`)
          : h("span", { class: "daemons" }, ", daemons ok"),
      n.incidents.map((i) => ` incident ${i["repair-status"]} (${i.action})`))));
}

function renderOverview(data) {
  const alerts = data.alerts.length
    ? h("ul", { class: "alerts" }, data.alerts.map((a) =>
      h("li", { class: `alert-${a.kind}`, "data-kind": a.kind }, `[${a.kind}] ${a.message}`)))
    : h("p", { class: "ok" }, "No alerts.");
  const states = Object.entries(data.instance_states);
  return [
    h("h1", {}, `Cluster ${data.cluster.name}`),
    h("section", { id: "alerts" }, h("h2", {}, "Alerts"), alerts),
    h("section", { id: "nodes" }, h("h2", {}, `Nodes (${data.nodes.length})`),
      h("table", { class: "cards" },
        h("thead", {}, h("tr", {}, ["Node", "Role", "State", "Memory used", "Disk used", "CPUs",
          "Instances (pri / sec)", "Health"].map((t) => h("th", {}, t)))),
        h("tbody", {}, nodeRows(data.nodes)))),
    h("section", { id: "instances" }, h("h2", {}, `Instances (${data.instances.length})`),
      h("p", {}, states.length ? states.map(([s, n]) => `${s}: ${n}`).join(", ") : "none"),
      h("table", { class: "cards" },
        h("thead", {}, h("tr", {}, ["Instance", "Status", "Primary", "Secondaries", "Template"].map((t) => h("th", {}, t)))),
        h("tbody", {}, data.instances.map((i) => h("tr", { "data-instance": i.name },
          h("td", { "data-label": "Instance" }, h("a", { href: `#/instance/${enc(i.name)}` }, i.name)),
          h("td", { "data-label": "Status", class: `status-${i.status}` }, i.status),
          h("td", { "data-label": "Primary" }, i.pnode),
          h("td", { "data-label": "Secondaries" }, i.snodes.join(", ")),
          h("td", { "data-label": "Template" }, i.disk_template)))))),
    h("section", { id: "running-jobs" }, h("h2", {}, "Running jobs"),
      data.jobs.length ? h("ul", {}, data.jobs.map((j) => h("li", {},
        h("a", { href: `#/job/${j.id}` }, `Job ${j.id}`), ` ${j.status} ${(j.summary || []).join(", ")}`)))
        : h("p", {}, "None.")),
  ];
}

async function overviewView(view) {
  const draw = (data) => view.replaceChildren(...renderOverview(data));
  draw(await api("/2/herder/overview"));
  return { onOverview: draw };  // the events stream redraws it
}

function chart(title, samples, pick, unit, id) {
  const points = samples.map((s) => [s.t, pick(s)]).filter(([, v]) => v !== null && v !== undefined);
  const box = h("div", { class: "chart", "data-chart": id }, h("h3", {}, title));
  if (points.length < 1) { box.append(h("p", { class: "hint" }, "No samples yet (one every few seconds).")); return box; }
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 300 100");
  svg.setAttribute("preserveAspectRatio", "none");
  if (points.length === 1) points.push([points[0][0] + 1, points[0][1]]);  // one sample: a flat line
  const t0 = Math.min(...points.map((p) => p[0])), t1 = Math.max(...points.map((p) => p[0]), t0 + 1);
  const max = Math.max(...points.map((p) => p[1]), 1);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.map(([t, v]) => `${(300 * (t - t0)) / (t1 - t0)},${100 - (95 * v) / max}`).join(" "));
  svg.append(line);
  const last = points[points.length - 1][1];
  const count = samples.filter((s) => pick(s) !== null && pick(s) !== undefined).length;
  box.append(svg, h("p", { class: "hint" }, `now ${unit(last)}, peak ${unit(max)}, ${count} samples`));
  return box;
}

async function nodeView(view, name) {
  const jobsArea = h("div", { class: "jobs-area" });
  const body = h("div");
  view.replaceChildren(h("h1", {}, `Node ${name}`), jobsArea, body);
  const draw = async () => {
    const [node, samples, instances] = await Promise.all([
      api(`/2/nodes/${enc(name)}`), api(`/2/herder/nodes/${enc(name)}/samples`), api("/2/herder/overview")]);
    const mine = instances.instances.filter((i) => i.pnode === node.name || i.snodes.includes(node.name));
    const actions = [
      { id: "drain", label: `Drain ${name}`, method: "PUT", path: `/2/nodes/${enc(name)}/role`, body: "drained" },
      { id: "undrain", label: `Undrain ${name}`, method: "PUT", path: `/2/nodes/${enc(name)}/role`, body: "regular" },
      { id: "evacuate", label: `Evacuate ${name}`, method: "POST", path: `/2/nodes/${enc(name)}/evacuate`, body: { mode: "all" }, danger: true },
      { id: "migrate-all", label: `Migrate all primaries off ${name}`, method: "POST", path: `/2/nodes/${enc(name)}/migrate`, body: {} },
      { id: "powercycle", label: `Power cycle ${name}`, method: "POST", path: `/2/nodes/${enc(name)}/powercycle`, query: { force: 1 }, danger: true },
    ].map((spec) => actionButton({ ...spec, jobsArea }));
    body.replaceChildren(
      h("section", {}, h("h2", {}, "State"), h("table", {}, h("tbody", {},
        [["Role", ROLES[node.role] || node.role], ["Offline", node.offline], ["Drained", node.drained], ["Primary IP", node.pip],
          ["Memory", usage(node.mtotal === null ? null : node.mtotal - node.mfree, node.mtotal)],
          ["Disk", usage(node.dtotal === null ? null : node.dtotal - node.dfree, node.dtotal)],
          ["CPUs", node.ctotal ?? "–"], ["Live figures", samples.error || "ok"],
          ["mond", (samples.samples.at(-1) || {}).mond_error || "ok"]]
          .map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, shown(v)))))),
        h("div", { class: "actions" }, actions)),
      h("section", { id: "charts" }, h("h2", {}, "The last hour"), h("div", { class: "charts" },
        chart("CPU load (CPUs busy)", samples.samples, (s) => s.cpu_load, (v) => v.toFixed(2), "cpu"),
        chart("Memory used", samples.samples, (s) => s.mem_used, mib, "memory"),
        chart("Disk I/O (read + written)", samples.samples,
          (s) => (s.io_read_bps === null || s.io_read_bps === undefined ? null : s.io_read_bps + s.io_write_bps), rate, "io"),
        chart("DRBD devices resyncing", samples.samples, (s) => s.drbd_syncing, (v) => `${v}`, "drbd"),
        chart("Storage used", samples.samples, (s) => s.disk_used, mib, "storage"),
        chart("Running instances", samples.samples, (s) => s.instances, (v) => `${v}`, "instances"))),
      h("section", { id: "storage" }, h("h2", {}, "Storage units"), h("table", {},
        h("thead", {}, h("tr", {}, ["Type", "Name", "Size", "Free"].map((t) => h("th", {}, t)))),
        h("tbody", {}, samples.storage.map((u) => h("tr", {}, h("td", {}, u.type), h("td", {}, u.name),
          h("td", {}, mib(u.storage_size)), h("td", {}, mib(u.storage_free))))))),
      h("section", {}, h("h2", {}, "Instances"), h("ul", {}, mine.map((i) => h("li", {},
        h("a", { href: `#/instance/${enc(i.name)}` }, i.name), ` ${i.status} (${i.pnode === node.name ? "primary" : "secondary"})`)))));
  };
  await draw();
  return draw;
}

function instanceActions(name, inst, jobsArea) {
  const path = `/2/instances/${enc(name)}`;
  const amount = h("input", { type: "number", min: 1, value: 1024, id: "grow-amount" });
  const disk = h("input", { type: "number", min: 0, value: 0, id: "grow-disk" });
  const grow = { node: h("p", {}, "Disk ", disk, " grows by (MiB) ", amount),
    body: () => ({ amount: Number(amount.value), wait_for_sync: false }) };
  // changes of a running instance: plugged in at once with "hotplug" (Ganeti's --hotplug),
  // else at its next start
  const hotplug = () => h("input", { type: "checkbox", checked: inst.status === "running", class: "hotplug" });
  const diskSize = h("input", { type: "number", min: 1, value: 1024, id: "add-disk-size" });
  const diskHotplug = hotplug();
  const addDisk = { node: h("p", {}, "A new disk of (MiB) ", diskSize, h("label", {}, diskHotplug, " hotplug")),
    body: () => ({ disks: [["add", { size: Number(diskSize.value) }]], hotplug: diskHotplug.checked }) };
  const nicNetwork = h("input", { type: "text", id: "add-nic-network", placeholder: "network (none: the cluster's default link)" });
  const nicIp = h("input", { type: "text", id: "add-nic-ip", value: "pool", placeholder: "IP: pool, none or an address" });
  const nicHotplug = hotplug();
  const addNic = { node: h("p", {}, "A new NIC on ", nicNetwork, " with IP ", nicIp, h("label", {}, nicHotplug, " hotplug")),
    body: () => {
      const params = { mac: "generate" };
      if (nicNetwork.value.trim()) params.network = nicNetwork.value.trim();
      if (nicIp.value.trim() && (params.network || nicIp.value.trim() !== "pool")) params.ip = nicIp.value.trim();
      return { nics: [["add", params]], hotplug: nicHotplug.checked };
    } };
  const nicIndex = h("input", { type: "number", min: 0, value: Math.max(0, inst["nic.macs"].length - 1), id: "remove-nic-index" });
  const nicRemoveHotplug = hotplug();
  const removeNic = { node: h("p", {}, "NIC ", nicIndex, " goes", h("label", {}, nicRemoveHotplug, " hotplug")),
    body: () => ({ nics: [["remove", Number(nicIndex.value), {}]], hotplug: nicRemoveHotplug.checked }) };
  return [
    { id: "start", label: `Start ${name}`, method: "PUT", path: `${path}/startup`, confirm: false },
    { id: "shutdown", label: `Shut down ${name}`, method: "PUT", path: `${path}/shutdown`, danger: true },
    { id: "reboot", label: `Reboot ${name}`, method: "POST", path: `${path}/reboot` },
    { id: "migrate", label: `Migrate ${name}`, method: "PUT", path: `${path}/migrate`, body: {} },
    { id: "failover", label: `Fail over ${name}`, method: "PUT", path: `${path}/failover`, body: {} },
    { id: "replace-disks", label: `Replace the disks of ${name}`, method: "POST", path: `${path}/replace-disks`, body: { mode: "replace_auto" } },
    { id: "grow-disk", label: `Grow a disk of ${name}`, method: "POST", path: () => `${path}/disk/${Number(disk.value)}/grow`, extra: grow },
    { id: "add-disk", label: `Add a disk to ${name}`, method: "PUT", path: `${path}/modify`, extra: addDisk },
    { id: "add-nic", label: `Add a NIC to ${name}`, method: "PUT", path: `${path}/modify`, extra: addNic },
    { id: "remove-nic", label: `Remove a NIC of ${name}`, method: "PUT", path: `${path}/modify`, extra: removeNic, danger: true },
    { id: "remove", label: `Remove ${name}`, method: "DELETE", path, danger: true },
  ].map((spec) => actionButton({ ...spec, jobsArea }));
}

// Backups and snapshots (issue 30; docs/backup.md): the snapshots listed from the config
// (`/2/herder/instances/I/snapshots`, no node asked), each change an ordinary job through its
// route: a snapshot taken, rolled back to or removed; a backup (Ganeti's export to a node) and a
// restore (Ganeti's import of an export, as a new instance). Every action asks first; the
// destructive ones (rollback, removal, an export that shuts the instance down) say what goes.
function backupActions(name, nodes, snapshots, jobsArea) {
  const snapName = h("input", { type: "text", id: "snapshot-name", placeholder: "a name: letters, digits, _ . + -",
    value: `snap-${new Date().toISOString().slice(0, 19).replace(/[-:T]/g, "")}` });
  const addSnap = { node: h("p", {}, "Every disk snapshotted as ", snapName),
    body: () => ({ snapshot_name: snapName.value.trim() }) };
  const pick = () => {
    const chosen = document.getElementById("snapshot-pick");
    return chosen ? chosen.value : "";
  };
  const nodeSelect = (id) => h("select", { id }, nodes.map((n) => h("option", { value: n }, n)));
  const exportNode = nodeSelect("export-node");
  const exportShutdown = h("input", { type: "checkbox", id: "export-shutdown", checked: true });
  const exportRemove = h("input", { type: "checkbox", id: "export-remove-instance" });
  const backup = { node: h("div", {}, h("p", {}, "Export to node ", exportNode,
    " (the instance is shut down while its disks are read, started again after)"),
    h("label", {}, exportShutdown, " shut down for the export"), " ",
    h("label", {}, exportRemove, " remove the instance afterwards")),
    body: () => ({ destination: exportNode.value, mode: "local", shutdown: exportShutdown.checked,
      remove_instance: exportRemove.checked }) };
  const importNode = nodeSelect("import-node");
  const importPath = h("input", { type: "text", id: "import-export", value: name });
  const importName = h("input", { type: "text", id: "import-name", value: `${name.split(".")[0]}-restored` });
  const importStart = h("input", { type: "checkbox", id: "import-start", checked: true });
  // the export's disk template, or another one (its disks' data is copied either way)
  const importTemplate = h("select", { id: "import-template" }, h("option", { value: "" }, "the export's"),
    ["plain", "drbd", "file", "sharedfile", "rbd", "blockdev"].map((t) => h("option", { value: t }, t)));
  const restore = { node: h("div", {}, h("p", {}, "The export ", importPath, " on ", importNode),
    h("p", {}, "restored as the new instance ", importName, " with disks ", importTemplate,
      h("label", {}, importStart, " started"))),
    body: () => ({ __version__: 1, mode: "import", name: importName.value.trim(), src_node: importNode.value,
      src_path: importPath.value.trim(), pnode: importNode.value, start: importStart.checked,
      name_check: false, ip_check: false, ...(importTemplate.value ? { disk_template: importTemplate.value } : {}) }) };
  return [
    { id: "snapshot-add", label: `Take a snapshot of ${name}`, method: "POST", path: `/2/herder/instances/${enc(name)}/snapshots`, extra: addSnap },
    { id: "snapshot-rollback", label: `Roll ${name} back to the chosen snapshot (what was written since is lost; only while it is stopped)`, method: "PUT", path: () => `/2/herder/instances/${enc(name)}/snapshots/${enc(pick())}/rollback`, body: {}, danger: true },
    { id: "snapshot-remove", label: `Remove the chosen snapshot of ${name}`, method: "DELETE", path: () => `/2/herder/instances/${enc(name)}/snapshots/${enc(pick())}`, danger: true },
    { id: "backup-export", label: `Back up ${name} to a node`, method: "PUT", path: `/2/instances/${enc(name)}/export`, extra: backup, danger: true },
    { id: "backup-import", label: `Restore an export as a new instance`, method: "POST", path: `/2/instances`, extra: restore },
  ].map((spec) => {
    const button = actionButton({ ...spec, jobsArea });
    if (spec.id.startsWith("snapshot-") && spec.id !== "snapshot-add" && !snapshots.length) button.disabled = true;
    return button;
  });
}

function backupSection(name, inst, nodes, snapshots, jobsArea) {
  const kinds = ["ext", "rbd"];
  const rows = snapshots.map((s) => h("tr", { "data-snapshot": s.name },
    h("td", { "data-label": "Snapshot" }, s.name), h("td", { "data-label": "Taken" }, when(s.ctime)),
    h("td", { "data-label": "Volumes" }, s.disks.map((d) => `${d.iv_name || d.uuid}: ${d.volume.join(":")}`).join(", "))));
  return h("section", { id: "backups" }, h("h2", {}, `Backups and snapshots (${snapshots.length} snapshots)`),
    kinds.includes(inst.disk_template) ? "" : h("p", { class: "hint" },
      `${inst.disk_template} disks cannot be snapshotted (rbd and ext disks can); backups work for every template`),
    h("table", { class: "cards", id: "snapshots" },
      h("thead", {}, h("tr", {}, ["Snapshot", "Taken", "Volumes"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows)),
    h("p", { class: "writer" }, "Snapshot ", h("select", { id: "snapshot-pick" },
      snapshots.map((s) => h("option", { value: s.name }, s.name)))),
    h("div", { class: "actions", id: "backup-actions" }, backupActions(name, nodes, snapshots, jobsArea)));
}

// Each disk's state on each of its nodes as the nodes see it now (Ganeti's `instance info`:
// OP_INSTANCE_QUERY_DATA, a read job, so asked on demand, not at every redraw).
const LOCAL_DISK = { 1: "ok", 2: "syncing", 3: "unknown", 4: "faulty" };

function diskStatusCells(status, error) {
  if (error) return [h("td", { colspan: 4, class: "bad" }, `no answer: ${error}`)];
  if (!status) return [h("td", { colspan: 4, class: "warn" }, "not assembled on this node")];
  const sync = status.sync_percent === null || status.sync_percent === undefined ? "in sync"
    : `syncing ${Number(status.sync_percent).toFixed(1)}%${status.estimated_time ? `, ${status.estimated_time} s left` : ""}`;
  return [h("td", { "data-label": "Device" }, status.dev_path || "–"),
    h("td", { "data-label": "Sync", class: status.sync_percent === null || status.sync_percent === undefined ? "ok" : "warn" }, sync),
    h("td", { "data-label": "Degraded", class: status.is_degraded ? "bad" : "ok" }, status.is_degraded ? "degraded" : "no"),
    h("td", { "data-label": "Local disk", class: status.ldisk_status === 1 ? "ok" : "bad" },
      LOCAL_DISK[status.ldisk_status] || String(status.ldisk_status))];
}

function diskStatusBox(name) {
  const out = h("div", { id: "disk-status" });
  const ask = h("button", { id: "disk-status-ask", onclick: async () => {
    ask.disabled = true;
    out.replaceChildren(h("p", { class: "hint" }, "asking the nodes…"));
    try {
      const job = await jobOutcome(await api(`/2/instances/${enc(name)}/info`));
      if (job.status !== "success") throw new Error(`job ${job.id} ${job.status}: ${jobResult(job)}`);
      const info = job.opresult[0][name];
      const rows = info.disks.flatMap((disk, i) => [["pstatus", info.pnode, "primary"],
        ...info.snodes.map((node) => ["sstatus", node, "secondary"])].map(([key, node, role]) =>
        h("tr", { "data-disk": i, "data-node": node }, h("td", { "data-label": "Disk" }, `disk/${i}`),
          h("td", { "data-label": "Node" }, `${node} (${role})`),
          ...diskStatusCells(disk[key], disk[`${key}_error`]))));
      out.replaceChildren(h("table", { class: "cards" },
        h("thead", {}, h("tr", {}, ["Disk", "Node", "Device", "Sync", "Degraded", "Local disk"].map((t) => h("th", {}, t)))),
        h("tbody", {}, rows)), h("p", { class: "hint" }, `as the nodes saw it at ${new Date().toLocaleTimeString()} (job ${job.id})`));
    } catch (err) {
      out.replaceChildren(h("p", { class: "bad" }, `Disk status unavailable: ${err.message}`));
    } finally { ask.disabled = false; }
  } }, "Ask the nodes for the disks' status");
  return h("div", {}, ask, out);
}

function consoleSection(name) {
  const out = h("div", { id: "console-out" });
  const section = h("section", { id: "console", class: "writer" }, h("h2", {}, "Console"),
    h("div", { class: "actions" },
      h("button", { id: "open-serial", onclick: () => openSerial(name, out) }, "Serial console"),
      h("button", { id: "open-vnc", onclick: () => openVnc(name, out) }, "VNC"),
      h("button", { id: "show-log", onclick: () => showLog(name, out) }, "Serial log")),
    out);
  return section;
}

async function instanceView(view, name) {
  const jobsArea = h("div", { class: "jobs-area" });
  const body = h("div");
  let actions = null;
  view.replaceChildren(h("h1", {}, `Instance ${name}`), jobsArea, body);
  const consoleBox = state.me.write ? consoleSection(name) : null;
  const diskStatus = diskStatusBox(name);  // kept across redraws: its answer stays
  let paramsOpen = false;  // the parameters' list stays as the user left it across redraws
  const draw = async () => {
    const [inst, jobs, cluster, snapshots] = await Promise.all([api(`/2/instances/${enc(name)}`),
      api(`/2/herder/instances/${enc(name)}/jobs`), api("/2/herder/overview"),
      api(`/2/herder/instances/${enc(name)}/snapshots`)]);
    // each disk node's state as masterd knows it (its live figures, maintd's incidents)
    const nodeState = Object.fromEntries(cluster.nodes.map((n) => [n.name,
      n.state !== "online" ? n.state : n.live_error ? "unreachable" : n.incidents.length ? "incident" : "ok"]));
    const degraded = cluster.alerts.some((a) => a.kind === "degraded-mirror" && a.subject === inst.name);
    actions = actions || h("div", { class: "actions", id: "instance-actions" }, instanceActions(name, inst, jobsArea));
    const nodes = [inst.pnode, ...inst.snodes];
    body.replaceChildren(
      h("section", { id: "state" }, h("h2", {}, "State"), h("table", {}, h("tbody", {},
        [["Status", h("span", { id: "instance-status", class: `status-${inst.status}` }, inst.status)],
          ["Admin state", inst.admin_state], ["Primary node", h("a", { id: "instance-pnode", href: `#/node/${enc(inst.pnode)}` }, inst.pnode)],
          ["Secondary nodes", inst.snodes.join(", ") || "none"], ["OS", inst.os], ["Hypervisor", inst.hypervisor],
          ["Memory (oper)", inst.oper_ram ?? "–"], ["VCPUs (oper)", inst.oper_vcpus ?? "–"]]
          .map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, shown(v)))))), actions),
      h("section", { id: "disks" }, h("h2", {}, `Disks (${inst.disk_template})`), h("table", { class: "cards" },
        h("thead", {}, h("tr", {}, ["Disk", "Name", "Size", "Nodes", "Mirror", "Active"].map((t) => h("th", {}, t)))),
        h("tbody", {}, inst["disk.sizes"].map((size, i) => h("tr", {},
          h("td", { "data-label": "Disk" }, `disk/${i}`), h("td", { "data-label": "Name" }, inst["disk.names"][i] || ""),
          h("td", { "data-label": "Size" }, mib(size)),
          h("td", { "data-label": "Nodes", class: "disk-nodes" }, nodes.map((n, k) =>
            `${n} (${k === 0 ? "primary" : "secondary"}: ${nodeState[n] || "unknown"})`).join(", ")),
          h("td", { "data-label": "Mirror", class: degraded ? "bad" : "" },
            inst.disk_template === "drbd" ? (degraded ? "degraded" : "both nodes reachable") : "–"),
          h("td", { "data-label": "Active" }, inst.disks_active ? "yes" : "no"))))), diskStatus),
      h("section", { id: "nics" }, h("h2", {}, "NICs"), h("table", { class: "cards" },
        h("thead", {}, h("tr", {}, ["NIC", "MAC", "IP", "Mode", "Link", "Network"].map((t) => h("th", {}, t)))),
        h("tbody", {}, inst["nic.macs"].map((mac, i) => h("tr", {}, h("td", {}, `nic/${i}`), h("td", {}, mac),
          h("td", {}, inst["nic.ips"][i] || ""), h("td", {}, inst["nic.modes"][i]), h("td", {}, inst["nic.links"][i]),
          h("td", {}, inst["nic.networks.names"][i] || "")))))),
      h("section", { id: "params" }, h("details", { open: paramsOpen,
        ontoggle: (event) => { paramsOpen = event.target.open; } }, h("summary", {}, h("h2", {},
        `Parameters (${Object.keys({ ...inst.beparams, ...inst.hvparams }).length})`)), h("table", {}, h("tbody", {},
        Object.entries({ ...inst.beparams, ...inst.hvparams }).map(([k, v]) =>
          h("tr", {}, h("th", {}, k), h("td", {}, typeof v === "object" ? JSON.stringify(v) : String(v)))))))),
      backupSection(name, inst, cluster.nodes.map((n) => n.name), snapshots, jobsArea),
      consoleBox,
      h("section", { id: "history" }, h("h2", {}, "Jobs"), h("ul", {}, jobs.slice().reverse().map((j) => h("li", {},
        h("a", { href: `#/job/${j.id}` }, `Job ${j.id}`), ` ${(j.summary || []).join(", ")} `,
        h("span", { class: `status-${j.status}` }, j.status), ` ${when(j.received_ts)}`)))));
  };
  await draw();
  return draw;
}

async function jobsView(view) {
  const draw = async () => {
    const jobs = await api("/2/jobs", { query: { bulk: 1 } });
    view.replaceChildren(h("h1", {}, "Jobs"), h("section", {}, h("table", { class: "cards" },
      h("thead", {}, h("tr", {}, ["Job", "Status", "Summary", "Received", "Ended"].map((t) => h("th", {}, t)))),
      h("tbody", {}, jobs.slice().reverse().slice(0, 200).map((j) => h("tr", { "data-job": j.id },
        h("td", { "data-label": "Job" }, h("a", { href: `#/job/${j.id}` }, j.id)),
        h("td", { "data-label": "Status", class: `status-${j.status}` }, j.status),
        h("td", { "data-label": "Summary" }, (j.summary || []).join(", ")),
        h("td", { "data-label": "Received" }, when(j.received_ts)),
        h("td", { "data-label": "Ended" }, when(j.end_ts))))))));
  };
  await draw();
  return draw;
}

async function jobView(view, id) {
  await api(`/2/jobs/${enc(id)}`);  // a clear message for an unknown job
  const area = h("div");
  view.replaceChildren(h("h1", {}, `Job ${id}`), area);
  followJob(Number(id), area, null);
  return null;
}

async function maintenanceView(view) {
  const draw = async () => {
    let data = null, error = null;
    try { data = await api("/2/herder/maintd"); } catch (err) { error = err.message; }
    const settings = await api("/2/herder/maintenance");
    const incidents = data ? data.incidents : settings.incidents;
    view.replaceChildren(h("h1", {}, "Maintenance"),
      error ? h("p", { class: "bad" }, `maintd: ${error}`) : null,
      h("section", {}, h("h2", {}, "maintd"), h("p", {},
        `enabled: ${settings.enabled}, harep: ${settings.harep}, round delay: ${settings.roundDelay}s`,
        data ? `, rounds: ${data.rounds}, ticks: ${data.ticks}, last error: ${data.error || "none"}` : "")),
      h("section", { id: "incidents" }, h("h2", {}, "Incidents"), h("table", { class: "cards" },
        h("thead", {}, h("tr", {}, ["Node", "Action", "Status", "Jobs", "Details"].map((t) => h("th", {}, t)))),
        h("tbody", {}, incidents.map((i) => h("tr", { "data-incident": i.uuid },
          h("td", { "data-label": "Node" }, i.node), h("td", { "data-label": "Action" }, i.action),
          h("td", { "data-label": "Status", class: "status" }, i["repair-status"]),
          h("td", { "data-label": "Jobs" }, (i.jobs || []).join(", ")),
          h("td", { "data-label": "Details" }, JSON.stringify(i.original)))))),
      ),
      data ? h("section", { id: "reports" }, h("h2", {}, "Self-diagnose"), h("ul", {}, data.reports.map((r) =>
        h("li", {}, `${r.name}: ${r.error || (r.data && r.data.status) || "?"}`)))) : null,
      data ? h("section", { id: "notifications" }, h("h2", {}, "Notifications"),
        data.notifications.length ? h("ul", {}, data.notifications.map((n) => h("li", {}, JSON.stringify(n))))
          : h("p", {}, "None.")) : null,
      data ? h("section", {}, h("h2", {}, "Notes"), h("ul", {}, (data.notes || []).slice(-20).map((n) =>
        h("li", {}, typeof n === "string" ? n : JSON.stringify(n))))) : null);
  };
  await draw();
  return draw;
}

async function createView(view) {
  const info = await api("/2/info");
  const field = (label, input) => [h("label", { for: input.id }, label), input];
  const name = h("input", { id: "c-name", required: true });
  const template = h("select", { id: "c-template" }, info.enabled_disk_templates.map((t) => h("option", {}, t)));
  const os = h("input", { id: "c-os", value: "debootstrap+default" });
  const size = h("input", { id: "c-disk", type: "number", min: 1, value: 1024 });
  const memory = h("input", { id: "c-memory", type: "number", min: 64, value: 512 });
  const vcpus = h("input", { id: "c-vcpus", type: "number", min: 1, value: 1 });
  const choice = h("p", { id: "c-choice" }, "Preview the allocator's choice before creating.");
  const jobsArea = h("div", { class: "jobs-area" });
  const request = () => ({ __version__: 1, name: name.value.trim(), disk_template: template.value,
    os_type: os.value.trim(), disks: [{ size: Number(size.value) }], nics: [{}],
    beparams: { maxmem: Number(memory.value), minmem: Number(memory.value), vcpus: Number(vcpus.value) },
    name_check: false, ip_check: false });
  const create = h("button", { id: "c-create", type: "button", disabled: true, onclick: async () => {
    try {
      const jobId = await api("/2/instances", { method: "POST", body: request() });
      followJob(jobId, jobsArea, () => refreshSoon(0));
    } catch (err) { banner(`create refused: ${err.message}`); }
  } }, "Create");
  const preview = h("button", { id: "c-preview", type: "button", onclick: async () => {
    create.disabled = true;
    choice.textContent = "asking the allocator…";
    try {
      const jobId = await api("/2/instances", { method: "POST", body: request(), query: { "dry-run": 1 } });
      const job = await jobOutcome(jobId);
      if (job.status === "success") {
        choice.textContent = `The allocator would place it on ${job.opresult[0].join(", ")}.`;
        create.disabled = false;
      } else choice.textContent = `Not possible: ${jobResult(job)}`;
    } catch (err) { choice.textContent = `Refused: ${err.message}`; }
  } }, "Preview placement");
  for (const input of [name, template, os, size, memory, vcpus]) input.addEventListener("input", () => { create.disabled = true; });
  view.replaceChildren(h("h1", {}, "Create an instance"), h("section", {},
    h("form", { class: "grid", id: "create-form", onsubmit: (e) => e.preventDefault() },
      field("Name", name), field("Disk template", template), field("OS", os), field("Disk (MiB)", size),
      field("Memory (MiB)", memory), field("VCPUs", vcpus)),
    h("div", { class: "actions" }, preview, create), choice), jobsArea);
  return null;
}

// --- routing and live updates ------------------------------------------------------------------

const ROUTES = [
  [/^#?\/?$/, overviewView], [/^#\/node\/(.+)$/, nodeView], [/^#\/instance\/(.+)$/, instanceView],
  [/^#\/jobs$/, jobsView], [/^#\/job\/(\d+)$/, jobView], [/^#\/maintenance$/, maintenanceView],
  [/^#\/create$/, createView],
];

// Each view draws into its own element: a view still loading when another is asked for (a
// click, a typed address) draws into an element no longer shown, never over the new one.
let routeSerial = 0;
async function route() {
  const serial = ++routeSerial;
  const view = h("div", { class: "page" }, h("p", {}, "Loading…"));
  document.getElementById("view").replaceChildren(view);
  state.refresh = null;
  state.onOverview = null;
  banner("");
  for (const [pattern, render] of ROUTES) {
    const match = location.hash.match(pattern);
    if (!match) continue;
    const args = match.slice(1).map(decodeURIComponent);
    try {
      const drawn = await render(view, ...args);
      if (serial !== routeSerial) return;
      if (typeof drawn === "function") state.refresh = drawn;
      else if (drawn && drawn.onOverview) state.onOverview = drawn.onOverview;
    } catch (err) {
      view.replaceChildren(h("h1", {}, "Cannot show this page"), h("p", { class: "bad", id: "page-error" }, err.message));
    }
    return;
  }
  view.replaceChildren(h("p", { class: "bad", id: "page-error" }, `No page ${location.hash}`));
}

let refreshTimer = null;
function refreshSoon(delay = 1000) {
  if (!state.refresh || refreshTimer) return;
  refreshTimer = setTimeout(async () => {
    refreshTimer = null;
    if (!state.refresh) return;
    try { await state.refresh(); } catch (err) { banner(err.message); }
  }, delay);
}

function watchCluster() {
  const source = new EventSource("/2/herder/events");
  source.addEventListener("overview", (event) => {
    document.body.dataset.updated = String(Date.now());
    if (state.onOverview) state.onOverview(JSON.parse(event.data));
    else refreshSoon();
  });
  // the session or the user went (docs/security.md "Streams"): log in again
  source.addEventListener("ended", () => { source.close(); location.href = "/ui/login?why=ended"; });
  state.overviewStream = source;
}

async function start() {
  try {
    state.me = await api("/ui/session");
  } catch {
    location.href = "/ui/login";
    return;
  }
  document.getElementById("whoami").textContent = `${state.me.user} (${state.me.write ? "may act" : "read-only"})`;
  document.getElementById("logout-csrf").value = state.me.csrf;
  if (!state.me.write) document.body.classList.add("readonly");
  window.addEventListener("hashchange", route);
  await route();
  watchCluster();
}

start();
