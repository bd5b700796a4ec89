// The understudy console: plain JavaScript, no build step. Views are
// chosen by the URL hash (#/registry?ns=&group=&service=, #/cluster,
// #/chaos); server-sent events from /understudy/v1/events tell the page
// when the registry changed (and tick once a second), and it reads the
// view it shows again.
"use strict";

const main = document.getElementById("main");
const live = document.getElementById("live");
const who = document.getElementById("who");
const loginForm = document.getElementById("login");
let token = sessionStorage.getItem("understudy.token") || "";
let events = null;
let rendering = null;
let again = false;

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

class Denied extends Error {}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (token) headers.Authorization = "Bearer " + token;
  const reply = await fetch(path, Object.assign({}, options, { headers }));
  const text = await reply.text();
  if (reply.status === 403) {
    let message = text;
    try { message = JSON.parse(text).data || text; } catch (_) { /* plain text */ }
    if (/user not found|token/.test(message)) throw new Denied(message);
    throw new Error(message);
  }
  if (!reply.ok) {
    let message = text;
    try { message = JSON.parse(text).data || text; } catch (_) { /* plain text */ }
    throw new Error(reply.status + ": " + message);
  }
  try { return JSON.parse(text); } catch (_) { return text; }
}

function route() {
  const hash = location.hash.replace(/^#\/?/, "") || "registry";
  const [view, query] = hash.split("?");
  return { view, params: new URLSearchParams(query || "") };
}

function link(view, params) {
  const query = new URLSearchParams(params).toString();
  return "#/" + view + (query ? "?" + query : "");
}

// ---- registry ------------------------------------------------------------

async function renderRegistry(params) {
  const namespaces = (await api("/nacos/v1/console/namespaces")).data || [];
  const ns = params.get("ns") || "";
  const registry = await api("/understudy/v1/registry?namespace=" + encodeURIComponent(ns));
  const group = params.get("group");
  const service = params.get("service");
  let detail = '<p class="muted">Choose a service.</p>';
  if (group && service) {
    const query = new URLSearchParams({ namespace: ns, group, service });
    detail = renderService(await api("/understudy/v1/registry/service?" + query));
  }
  const options = namespaces.map((n) => {
    const id = n.namespace || "";
    const label = (n.namespaceShowName || id || "public") + (id ? " (" + id + ")" : "");
    return `<option value="${esc(id)}"${id === ns ? " selected" : ""}>${esc(label)}</option>`;
  }).join("");
  const groups = registry.groups.map((g) => `
    <h3>${esc(g.name)}</h3>
    <ul>${g.services.map((s) => {
      const selected = g.name === group && s.name === service ? " selected" : "";
      const href = link("registry", { ns, group: g.name, service: s.name });
      return `<li><a class="svc${selected}" href="${href}" data-service="${esc(g.name + "@@" + s.name)}">
        <span>${esc(s.name)}</span><span class="count">${s.healthy}/${s.instances}</span></a></li>`;
    }).join("")}</ul>`).join("");
  return `
    <h1>Registry</h1>
    <div class="toolbar">
      <label>Namespace <select id="ns">${options}</select></label>
      <span class="muted" id="revision" data-revision="${registry.revision}">revision ${registry.revision}</span>
    </div>
    <div class="layout">
      <div class="card services" id="services">${groups || '<p class="muted">No services.</p>'}</div>
      <div id="detail">${detail}</div>
    </div>`;
}

function renderService(s) {
  if (!s.exists) {
    return `<div class="card"><h2>${esc(s.group)}@@${esc(s.service)}</h2><p class="muted">No such service.</p></div>`;
  }
  const zones = s.zones.map((z) => `
    <h3 data-zone="${esc(z.name)}">zone ${esc(z.name)} · ${z.instances.length} instance${z.instances.length === 1 ? "" : "s"}</h3>
    <table>
      <thead><tr><th>Address</th><th>Health</th><th>Weight</th><th>Cluster</th><th>Kind</th><th>Metadata</th></tr></thead>
      <tbody>${z.instances.map((i) => `
        <tr data-instance="${esc(i.ip + ":" + i.port)}" data-healthy="${i.healthy}">
          <td>${esc(i.ip)}:${i.port}</td>
          <td><span class="dot ${i.healthy ? "ok" : "bad"}"></span>${i.healthy ? "healthy" : "unhealthy"}${i.enabled ? "" : " · disabled"}</td>
          <td class="num">${esc(i.weight)}</td>
          <td>${esc(i.cluster)}</td>
          <td>${i.ephemeral ? "ephemeral" : "persistent"}</td>
          <td>${Object.entries(i.metadata).map(([k, v]) => `<span class="tag">${esc(k)}=${esc(v)}</span>`).join("")}</td>
        </tr>`).join("")}
      </tbody>
    </table>`).join("");
  return `<div class="card"><h2>${esc(s.group)}@@${esc(s.service)}</h2>${zones || '<p class="muted">No instances.</p>'}</div>`;
}

// ---- cluster -------------------------------------------------------------

async function renderCluster() {
  const report = await api("/understudy/v1/cluster/nodes");
  const rows = report.nodes.map((n) => {
    const s = n.status || {};
    const lag = s.viewLagMs == null ? "–" : s.viewLagMs + " ms";
    const r2v = s.registerToVisible && s.registerToVisible.count ? s.registerToVisible.p99Ms.toFixed(1) + " ms" : "–";
    return `<tr data-node="${n.id}">
      <td class="num">${n.id}</td>
      <td>${esc(s.dc || n.dc)}</td>
      <td class="role-${esc(s.role)}">${esc(s.role || "unreachable")}</td>
      <td class="num">${s.term ?? "–"}</td>
      <td class="num">${s.leader ?? "–"}</td>
      <td class="num">${s.lastApplied ?? "–"}</td>
      <td class="num">${s.revision ?? "–"}</td>
      <td class="num" data-lag>${lag}</td>
      <td class="num">${r2v}</td>
      <td class="error">${esc(n.error || "")}</td>
    </tr>`;
  }).join("");
  return `
    <h1>Cluster</h1>
    <p class="muted">As node ${report.nodeId} sees it; refreshed every second.</p>
    <table id="nodes">
      <thead><tr><th>Node</th><th>DC</th><th>Role</th><th>Term</th><th>Leader</th><th>Applied</th><th>Revision</th><th>View lag</th><th>Register→visible p99</th><th></th></tr></thead>
      <tbody>${rows}</tbody>
    </table>`;
}

// ---- chaos ---------------------------------------------------------------

async function renderChaos(message) {
  const answer = await api("/understudy/v1/chaos");
  const faults = answer.faults;
  const rows = faults.links.map((l) => `
    <tr data-link="${esc(l.from + "->" + l.to)}">
      <td>${esc(l.from)}</td><td>${esc(l.to)}</td>
      <td class="num">${l.latencyMs} ms</td><td class="num">${l.jitterMs} ms</td>
      <td class="num">${(l.loss * 100).toFixed(1)}%</td>
      <td class="${l.cut ? "cut" : ""}">${l.cut ? "cut" : "–"}</td>
    </tr>`).join("");
  const extra = [
    faults.paused.length ? `<p>Paused nodes: ${faults.paused.map(esc).join(", ")}</p>` : "",
    ...(answer.warnings || []).map((w) => `<p class="error">${esc(w)}</p>`),
    message ? `<p class="${message.error ? "error" : "muted"}" id="chaos-message">${esc(message.text)}</p>` : "",
  ].join("");
  return `
    <h1>Chaos</h1>
    <table id="links">
      <thead><tr><th>From</th><th>To</th><th>Latency</th><th>Jitter</th><th>Loss</th><th>Cut</th></tr></thead>
      <tbody>${rows || '<tr><td colspan="6" class="muted">No link faults.</td></tr>'}</tbody>
    </table>
    ${extra}
    <h2>Change</h2>
    <form class="inline" id="set-link">
      <input name="spec" placeholder="hz-sh=40ms~10ms,loss=1%" size="32" required>
      <button type="submit">Set link</button>
    </form>
    <form class="inline" id="partition">
      <input name="a" placeholder="DC" size="8" required> ✂
      <input name="b" placeholder="DC" size="8" required>
      <button type="submit">Partition</button>
      <button type="button" class="plain" id="heal">Heal all</button>
    </form>`;
}

async function chaosAction(action, params) {
  const query = new URLSearchParams(params).toString();
  try {
    await api("/understudy/v1/chaos/" + action + (query ? "?" + query : ""), { method: "POST" });
    main.innerHTML = await renderChaos({ text: action + " applied" });
  } catch (e) {
    if (e instanceof Denied) return showLogin(e.message);
    main.innerHTML = await renderChaos({ text: e.message, error: true });
  }
  bindChaos();
}

function bindChaos() {
  const set = document.getElementById("set-link");
  if (!set) return;
  set.onsubmit = (e) => {
    e.preventDefault();
    chaosAction("links", { link: new FormData(set).get("spec") });
  };
  const cut = document.getElementById("partition");
  cut.onsubmit = (e) => {
    e.preventDefault();
    const data = new FormData(cut);
    chaosAction("partition", { a: data.get("a"), b: data.get("b") });
  };
  document.getElementById("heal").onclick = () => chaosAction("heal", {});
}

// ---- the frame -----------------------------------------------------------

async function render() {
  if (rendering) {
    again = true;
    return rendering;
  }
  rendering = (async () => {
    do {
      again = false;
      const { view, params } = route();
      for (const name of ["registry", "cluster", "chaos"]) {
        document.getElementById("nav-" + name).classList.toggle("active", name === view);
      }
      try {
        let html;
        if (view === "cluster") html = await renderCluster();
        else if (view === "chaos") html = await renderChaos();
        else html = await renderRegistry(params);
        main.innerHTML = html;
        main.dataset.view = view;
        main.dataset.rendered = String(Date.now());
        const ns = document.getElementById("ns");
        if (ns) ns.onchange = () => { location.hash = link("registry", { ns: ns.value }); };
        bindChaos();
        connect();
      } catch (e) {
        if (e instanceof Denied) {
          showLogin(e.message);
        } else {
          main.innerHTML = `<p class="error" id="error">${esc(e.message)}</p>`;
        }
      }
    } while (again);
    rendering = null;
  })();
  return rendering;
}

function connect() {
  if (events) return;
  const url = "/understudy/v1/events" + (token ? "?accessToken=" + encodeURIComponent(token) : "");
  events = new EventSource(url);
  events.onopen = () => { live.classList.add("on"); live.textContent = "live"; };
  events.onerror = () => { live.classList.remove("on"); live.textContent = "reconnecting"; };
  events.addEventListener("change", (e) => {
    const { revision } = JSON.parse(e.data);
    live.textContent = "live · revision " + revision;
    if (route().view === "registry") render();
  });
  events.addEventListener("tick", (e) => {
    const tick = JSON.parse(e.data);
    live.classList.add("on");
    live.textContent = `live · node ${tick.node} (${tick.dc}, ${tick.role}) · revision ${tick.revision}`;
    if (route().view === "cluster") render();
  });
}

function showLogin(message) {
  if (events) { events.close(); events = null; }
  loginForm.hidden = false;
  document.getElementById("login-error").textContent = token ? message : "";
  main.innerHTML = '<p class="muted">Log in to see the registry.</p>';
}

loginForm.onsubmit = async (e) => {
  e.preventDefault();
  const form = new URLSearchParams({
    username: document.getElementById("login-user").value,
    password: document.getElementById("login-password").value,
  });
  const reply = await fetch("/nacos/v1/auth/users/login", { method: "POST", body: form });
  if (!reply.ok) {
    document.getElementById("login-error").textContent = await reply.text();
    return;
  }
  const answer = await reply.json();
  token = answer.accessToken;
  sessionStorage.setItem("understudy.token", token);
  who.textContent = answer.username;
  loginForm.hidden = true;
  render();
};

window.addEventListener("hashchange", render);
render();
