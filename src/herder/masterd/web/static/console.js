// The VM's console on the instance page (write users only; the server refuses others):
// the serial console and VNC through RAPI's console websockets, the serial log as text.
// A websocket's failure says nothing about why, so the route is asked as plain HTTP first:
// a missing route, a refused user or a stopped instance gives its RAPI error here.
import { h } from "./app.js";

const enc = encodeURIComponent;
let current = null;  // the open console (a WebSocket or an RFB), closed when another opens

function closeCurrent() {
  if (current) { try { current.close ? current.close() : current.disconnect(); } catch { /* gone */ } }
  current = null;
}

async function routeProblem(path) {
  const response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (response.status === 404 || response.status === 401 || response.status === 403 ||
      response.status === 409 || response.status >= 500) {
    let explain = `${response.status} ${response.statusText}`;
    try { const body = await response.json(); if (body && body.explain) explain = body.explain; } catch { /* text */ }
    return `${response.status}: ${explain}`;
  }
  return null;  // the route exists (it wants a websocket: 400/426)
}

function showError(out, text) {
  out.replaceChildren(h("p", { class: "console-error", id: "console-error" }, `Console unavailable: ${text}`));
}

function wsUrl(path) {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
}

export async function openSerial(name, out) {
  closeCurrent();
  const path = `/2/instances/${enc(name)}/console/serial`;
  const problem = await routeProblem(path);
  if (problem) { showError(out, problem); return; }
  const screen = h("pre", { id: "serial-screen", tabindex: 0 }, "");
  const input = h("input", { id: "serial-input", placeholder: "type a line, Enter sends it", autocomplete: "off" });
  const status = h("p", { id: "serial-status", class: "hint" }, "connecting…");
  out.replaceChildren(status, screen, input);
  const socket = new WebSocket(wsUrl(path));
  current = socket;
  socket.onopen = () => { status.textContent = "connected"; };
  socket.onmessage = (event) => {
    screen.textContent += typeof event.data === "string" ? event.data : "";
    if (screen.textContent.length > 200000) screen.textContent = screen.textContent.slice(-100000);
    screen.scrollTop = screen.scrollHeight;
  };
  socket.onclose = (event) => { status.textContent = `closed (${event.code}${event.reason ? `: ${event.reason}` : ""})`; };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && socket.readyState === WebSocket.OPEN) {
      socket.send(`${input.value}\n`);
      input.value = "";
    }
  });
}

export async function openVnc(name, out) {
  closeCurrent();
  const path = `/2/instances/${enc(name)}/console/vnc`;
  const problem = await routeProblem(path);
  if (problem) { showError(out, problem); return; }
  const status = h("p", { id: "vnc-status", class: "hint" }, "connecting…");
  const screen = h("div", { id: "vnc-screen" });
  out.replaceChildren(status, screen);
  const { default: RFB } = await import("./novnc/core/rfb.js");
  const rfb = new RFB(screen, wsUrl(path), { wsProtocols: [] });
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => { status.textContent = "connected"; status.dataset.state = "connected"; });
  rfb.addEventListener("disconnect", (event) => {
    status.textContent = event.detail.clean ? "disconnected" : "connection lost";
    status.dataset.state = "disconnected";
  });
  rfb.addEventListener("credentialsrequired", () => { status.textContent = "the VNC server asks for a password"; });
  current = rfb;
}

export async function showLog(name, out) {
  closeCurrent();
  const path = `/2/instances/${enc(name)}/console/log?lines=200`;
  const response = await fetch(path, { credentials: "same-origin" });
  const text = await response.text();
  if (!response.ok) {
    let explain = text;
    try { explain = JSON.parse(text).explain || text; } catch { /* text */ }
    showError(out, `${response.status}: ${explain}`);
    return;
  }
  out.replaceChildren(h("pre", { id: "serial-log" }, text));
}
