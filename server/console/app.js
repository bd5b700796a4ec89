// The understudy console: plain JavaScript, no build step. Views are
// chosen by the URL hash (#/registry?ns=&group=&service=, #/configs,
// #/config?ns=&group=&dataId=, #/history?…&nid=, #/cluster, #/chaos);
// server-sent events from /understudy/v1/events tell the page when the
// registry changed (and tick once a second), and it reads the view it
// shows again. The cluster view's charts come from samples the page takes
// once a second.
"use strict";

const main = document.getElementById("main");
const live = document.getElementById("live");
const who = document.getElementById("who");
const loginForm = document.getElementById("login");
let token = sessionStorage.getItem("understudy.token") || "";
let events = null;
let rendering = null;
let again = false;
// A message for the next view rendered (after a publish, a delete).
let flash = null;

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
    detail = renderService(await api("/understudy/v1/registry/service?" + query))
      + await renderSubscribers(ns, group, service);
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
    </table>
    ${lagChart("lag-chart", "View lag per DC (ms)", "lag")}
    ${lagChart("r2v-chart", "Register → visible p99 per DC (ms)", "r2v")}`;
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

// ---- configs -------------------------------------------------------------

const CONFIG_API = "/nacos/v3/admin/cs/config";

function configQuery(ns, group, dataId, extra = {}) {
  return new URLSearchParams(Object.assign({ namespaceId: ns, groupName: group, dataId }, extra)).toString();
}

// The config `ns/group/dataId`, or null when there is none.
async function loadConfig(ns, group, dataId) {
  try {
    return (await api(CONFIG_API + "?" + configQuery(ns, group, dataId))).data;
  } catch (e) {
    if (/not exist|not found|404/i.test(e.message)) return null;
    throw e;
  }
}

function time(ms) {
  return ms ? new Date(ms).toLocaleString() : "–";
}

async function renderConfigs(params, message) {
  const ns = params.get("ns") || "";
  const dataId = params.get("dataId") || "";
  const group = params.get("group") || "";
  const query = new URLSearchParams({
    namespaceId: ns, dataId, groupName: group, search: "blur", pageNo: "1", pageSize: "200",
  });
  const page = (await api(CONFIG_API + "/list?" + query)).data;
  const rows = page.pageItems.map((c) => {
    const at = { ns, group: c.groupName, dataId: c.dataId };
    return `<tr data-config="${esc(c.groupName + "/" + c.dataId)}">
      <td><a href="${link("config", at)}">${esc(c.dataId)}</a></td>
      <td>${esc(c.groupName)}</td>
      <td>${esc(c.type || "text")}</td>
      <td class="num"><code>${esc(c.md5.slice(0, 8))}</code></td>
      <td>${esc(time(c.modifyTime))}</td>
      <td><a href="${link("history", at)}">history</a></td>
    </tr>`;
  }).join("");
  return `
    <h1>Configs</h1>
    <form class="inline" id="config-search">
      <input name="dataId" placeholder="dataId (* matches any run)" value="${esc(dataId)}" size="28">
      <input name="group" placeholder="group" value="${esc(group)}" size="18">
      <button type="submit">Search</button>
      <a class="button plain" href="${link("config", { ns, new: "1" })}" id="new-config">New config</a>
      <span class="muted">${page.totalCount} config${page.totalCount === 1 ? "" : "s"} in namespace ${esc(ns || "public")}</span>
    </form>
    ${message ? `<p class="muted" id="config-message">${esc(message)}</p>` : ""}
    <table id="configs">
      <thead><tr><th>Data id</th><th>Group</th><th>Type</th><th>MD5</th><th>Modified</th><th></th></tr></thead>
      <tbody>${rows || '<tr><td colspan="6" class="muted">No configs.</td></tr>'}</tbody>
    </table>`;
}

function bindConfigs(params) {
  const form = document.getElementById("config-search");
  if (!form) return;
  form.onsubmit = (e) => {
    e.preventDefault();
    const data = new FormData(form);
    location.hash = link("configs", { ns: params.get("ns") || "", dataId: data.get("dataId"), group: data.get("group") });
  };
}

// A line diff (longest common subsequence), as rows of [left, right, kind]
// with kind "same", "del", "add" or "change".
function diffLines(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const rows = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { rows.push([a[i], b[j], "same"]); i++; j++; continue; }
    // A run of removed lines and the run of added lines after it face
    // each other as changed lines; what is left over stays one-sided.
    const dels = [], adds = [];
    while (i < n && (j === m || lcs[i + 1][j] >= lcs[i][j + 1]) && !(j < m && a[i] === b[j])) dels.push(a[i++]);
    while (j < m && (i === n || lcs[i][j + 1] > lcs[i + 1][j]) && !(i < n && a[i] === b[j])) adds.push(b[j++]);
    for (let k = 0; k < Math.max(dels.length, adds.length); k++) {
      if (k < dels.length && k < adds.length) rows.push([dels[k], adds[k], "change"]);
      else if (k < dels.length) rows.push([dels[k], null, "del"]);
      else rows.push([null, adds[k], "add"]);
    }
  }
  return rows;
}

function renderDiff(before, after, leftTitle, rightTitle) {
  const rows = diffLines(before, after);
  const changed = rows.filter((r) => r[2] !== "same").length;
  const body = rows.map(([l, r, kind]) => `<tr class="diff-${kind}">
      <td class="diff-side">${l === null ? "" : esc(l)}</td>
      <td class="diff-side">${r === null ? "" : esc(r)}</td></tr>`).join("");
  return `<table class="diff" id="diff" data-changed="${changed}">
    <thead><tr><th>${esc(leftTitle)}</th><th>${esc(rightTitle)}</th></tr></thead>
    <tbody>${body}</tbody></table>`;
}

// The edit page's state: what the editor started from (for the diff and
// the compare-and-set), kept while the page shows.
let editing = null;

async function renderConfig(params, message) {
  const ns = params.get("ns") || "";
  const isNew = params.get("new") === "1";
  const group = params.get("group") || "DEFAULT_GROUP";
  const dataId = params.get("dataId") || "";
  const current = isNew ? null : await loadConfig(ns, group, dataId);
  if (!isNew && !current) {
    return `<h1>${esc(group)} / ${esc(dataId)}</h1><p class="muted">No such config.</p>`;
  }
  editing = { ns, group, dataId, isNew, base: current ? current.content : "", md5: current ? current.md5 : "" };
  let beta = null;
  if (current) {
    try { beta = (await api(CONFIG_API + "/beta?" + configQuery(ns, group, dataId))).data; } catch (_) { beta = null; }
  }
  const listeners = current ? await renderListeners(ns, group, dataId) : "";
  const type = current ? current.type || "text" : "text";
  const types = ["text", "json", "xml", "yaml", "html", "properties", "toml"].map((t) =>
    `<option${t === type ? " selected" : ""}>${t}</option>`).join("");
  const title = isNew ? "New config" : `${esc(group)} / ${esc(dataId)}`;
  const at = { ns, group, dataId };
  return `
    <h1>${title}</h1>
    ${message ? `<p class="${message.error ? "error" : "muted"}" id="config-message">${esc(message.text)}</p>` : ""}
    <form id="config-edit" class="card editor">
      <div class="inline">
        <label>Data id <input name="dataId" value="${esc(dataId)}" ${isNew ? "required" : "readonly"} size="30"></label>
        <label>Group <input name="group" value="${esc(group)}" ${isNew ? "required" : "readonly"} size="20"></label>
        <label>Type <select name="type">${types}</select></label>
        ${current ? `<span class="muted">md5 <code id="config-md5">${esc(current.md5)}</code> · modified ${esc(time(current.modifyTime))}</span>` : ""}
      </div>
      <textarea name="content" id="config-content" rows="14" spellcheck="false">${esc(current ? current.content : "")}</textarea>
      <div class="inline">
        <label>Beta IPs <input name="betaIps" placeholder="empty: publish to everyone" size="30"></label>
        <button type="submit" id="review">Review changes</button>
        ${current ? `<a href="${link("history", at)}">History</a>
        <button type="button" class="plain danger" id="delete">Delete…</button>` : ""}
      </div>
      <div id="confirm-delete" hidden class="confirm">
        Delete ${esc(group)} / ${esc(dataId)} for every client?
        <button type="button" class="danger" id="delete-yes">Delete</button>
        <button type="button" class="plain" id="delete-no">Cancel</button>
      </div>
    </form>
    <div id="review-pane"></div>
    ${beta ? `<div class="card" id="beta"><h2>Beta release</h2>
      <p>To ${esc(beta.betaIps || "(no IPs)")}; md5 <code>${esc(beta.md5 || "")}</code></p>
      <pre>${esc(beta.content || "")}</pre>
      <button type="button" class="plain" id="stop-beta">Stop the beta</button></div>` : ""}
    ${listeners}`;
}

async function publishConfig(form, content) {
  const data = new FormData(form);
  const ns = editing.ns;
  const group = editing.isNew ? data.get("group") : editing.group;
  const dataId = editing.isNew ? data.get("dataId") : editing.dataId;
  const headers = { "Content-Type": "application/x-www-form-urlencoded" };
  const betaIps = (data.get("betaIps") || "").trim();
  if (betaIps) headers.betaIps = betaIps;
  // Compare-and-set: the config must still be what the editor started
  // from, so two editors cannot overwrite each other silently.
  if (!editing.isNew && !betaIps) headers.casMd5 = editing.md5;
  if (editing.isNew && await loadConfig(ns, group, dataId)) {
    throw new Error(group + " / " + dataId + " already exists: open it to edit it");
  }
  const body = new URLSearchParams({ namespaceId: ns, groupName: group, dataId, content, type: data.get("type") });
  await api(CONFIG_API, { method: "POST", headers, body });
  return { ns, group, dataId, beta: !!betaIps };
}

function bindConfig() {
  const form = document.getElementById("config-edit");
  if (!form) return;
  const pane = document.getElementById("review-pane");
  form.onsubmit = (e) => {
    e.preventDefault();
    const content = form.content.value;
    pane.innerHTML = `<div class="card"><h2>Review</h2>
      ${renderDiff(editing.base, content, editing.isNew ? "(new)" : "published now", "to publish")}
      <div class="inline"><button type="button" id="publish">Publish</button>
      <button type="button" class="plain" id="cancel-review">Back to editing</button></div></div>`;
    document.getElementById("cancel-review").onclick = () => { pane.innerHTML = ""; };
    document.getElementById("publish").onclick = async () => {
      try {
        const done = await publishConfig(form, content);
        const at = { ns: done.ns, group: done.group, dataId: done.dataId };
        const text = done.beta ? "published as a beta release" : "published";
        if (location.hash === link("config", at)) {
          main.innerHTML = await renderConfig(route().params, { text });
          bindConfig();
        } else {
          flash = { text };
          location.hash = link("config", at);
        }
      } catch (err) {
        if (err instanceof Denied) return showLogin(err.message);
        const text = /409|md5|cas|conflict/i.test(err.message)
          ? "Not published: the config changed since you opened it (" + err.message + "). Reload to see the change."
          : "Not published: " + err.message;
        pane.insertAdjacentHTML("afterbegin", `<p class="error" id="publish-error">${esc(text)}</p>`);
      }
    };
  };
  const del = document.getElementById("delete");
  if (del) {
    const confirm = document.getElementById("confirm-delete");
    del.onclick = () => { confirm.hidden = false; };
    document.getElementById("delete-no").onclick = () => { confirm.hidden = true; };
    document.getElementById("delete-yes").onclick = async () => {
      await api(CONFIG_API + "?" + configQuery(editing.ns, editing.group, editing.dataId), { method: "DELETE" });
      flash = { text: "deleted " + editing.group + " / " + editing.dataId };
      location.hash = link("configs", { ns: editing.ns });
    };
  }
  const stop = document.getElementById("stop-beta");
  if (stop) {
    stop.onclick = async () => {
      await api(CONFIG_API + "/beta?" + configQuery(editing.ns, editing.group, editing.dataId), { method: "DELETE" });
      main.innerHTML = await renderConfig(route().params, { text: "beta stopped" });
      bindConfig();
    };
  }
}

async function renderHistory(params, message) {
  const ns = params.get("ns") || "";
  const group = params.get("group") || "DEFAULT_GROUP";
  const dataId = params.get("dataId") || "";
  const nid = params.get("nid");
  const query = configQuery(ns, group, dataId, { pageNo: "1", pageSize: "100" });
  const page = (await api("/nacos/v3/admin/cs/history/list?" + query)).data;
  const at = { ns, group, dataId };
  const rows = page.pageItems.map((h) => `
    <tr data-nid="${esc(h.id)}"${h.id === nid ? ' class="selected"' : ""}>
      <td><a href="${link("history", Object.assign({ nid: h.id }, at))}">${esc(time(h.modifyTime))}</a></td>
      <td>${esc({ I: "created", U: "updated", D: "deleted" }[h.opType] || h.opType)}</td>
      <td>${esc(h.publishType)}${h.grayName ? " (" + esc(h.grayName) + ")" : ""}</td>
      <td>${esc(h.srcIp || "")}</td>
    </tr>`).join("");
  let detail = '<p class="muted">Choose an entry to compare it with what is published now.</p>';
  if (nid) {
    const entry = (await api("/nacos/v3/admin/cs/history?" + configQuery(ns, group, dataId, { nid }))).data;
    const current = await loadConfig(ns, group, dataId);
    editing = { ns, group, dataId, md5: current ? current.md5 : "", entry };
    detail = `<div class="card" id="history-entry" data-nid="${esc(nid)}">
      <h2>Entry of ${esc(time(entry.modifyTime))}</h2>
      <p class="muted">by ${esc(entry.srcUser || "—")} from ${esc(entry.srcIp || "—")}, MD5 <code>${esc((entry.md5 || "").slice(0, 8))}</code></p>
      ${renderDiff(entry.content, current ? current.content : "", "this entry", current ? "published now" : "(deleted)")}
      <div class="inline"><button type="button" id="rollback">Roll back to this entry</button></div></div>`;
  }
  return `
    <h1>History of ${esc(group)} / ${esc(dataId)}</h1>
    <p><a href="${link("config", at)}">Back to the config</a></p>
    ${message ? `<p class="${message.error ? "error" : "muted"}" id="config-message">${esc(message.text)}</p>` : ""}
    <table id="history">
      <thead><tr><th>When</th><th>Operation</th><th>Release</th><th>Source IP</th></tr></thead>
      <tbody>${rows || '<tr><td colspan="6" class="muted">No history.</td></tr>'}</tbody>
    </table>
    ${detail}`;
}

function bindHistory() {
  const button = document.getElementById("rollback");
  if (!button) return;
  button.onclick = async () => {
    const { ns, group, dataId, md5, entry } = editing;
    const headers = { "Content-Type": "application/x-www-form-urlencoded" };
    if (md5) headers.casMd5 = md5;
    const body = new URLSearchParams({ namespaceId: ns, groupName: group, dataId, content: entry.content, type: entry.type || "text" });
    try {
      await api(CONFIG_API, { method: "POST", headers, body });
      flash = { text: "rolled back to the entry of " + time(entry.modifyTime) };
      location.hash = link("config", { ns, group, dataId });
    } catch (err) {
      if (err instanceof Denied) return showLogin(err.message);
      button.insertAdjacentHTML("afterend", `<p class="error" id="publish-error">${esc("Not rolled back: " + err.message)}</p>`);
    }
  };
}

// ---- subscribers and listeners --------------------------------------------

function renderClients(title, answer, withMd5) {
  const rows = answer.nodes.flatMap((n) => (n.clients || []).map((c) => `
    <tr data-client="${esc(c.id)}">
      <td>${esc(c.ip)}:${c.port}</td><td>${esc(c.version)}</td><td>${esc(c.appName || "")}</td>
      <td>node ${n.node} (${esc(n.dc)})</td>${withMd5 ? `<td><code>${esc((c.md5 || "").slice(0, 8))}</code></td>` : ""}
    </tr>`)).join("");
  const errors = answer.nodes.filter((n) => n.error).map((n) => `<p class="error">node ${n.node}: ${esc(n.error)}</p>`).join("");
  return `<div class="card clients" id="${withMd5 ? "listeners" : "subscribers"}"><h2>${title}</h2>
    <table><thead><tr><th>Client</th><th>SDK and version</th><th>App</th><th>Connected to</th>${withMd5 ? "<th>MD5 held</th>" : ""}</tr></thead>
    <tbody>${rows || `<tr><td colspan="${withMd5 ? 5 : 4}" class="muted">None.</td></tr>`}</tbody></table>${errors}</div>`;
}

async function renderSubscribers(ns, group, service) {
  const query = new URLSearchParams({ namespace: ns, group, service });
  return renderClients("Subscribers", await api("/understudy/v1/registry/subscribers?" + query), false);
}

async function renderListeners(ns, group, dataId) {
  const query = new URLSearchParams({ namespace: ns, group, dataId });
  return renderClients("Listeners", await api("/understudy/v1/registry/listeners?" + query), true);
}

// ---- lag over time ---------------------------------------------------------

// What the page has sampled since it opened, once a second: each DC's view
// lag and register-to-visible p99 (the worst node of the DC), and the
// fault changes seen between samples.
const LAG_WINDOW_MS = 5 * 60 * 1000;
const samples = [];
const faultMarks = [];
let lastFaults = null;
let sampling = false;

// What changed between two fault models, in words: "cut hz-sh",
// "heal hz-sh", "link hz->sh 40ms", "pause 2", "resume 2".
function faultChanges(before, after) {
  const out = [];
  const key = (l) => l.from + "->" + l.to;
  const old = new Map((before.links || []).map((l) => [key(l), l]));
  const now = new Map((after.links || []).map((l) => [key(l), l]));
  const pair = (l) => [l.from, l.to].sort().join("-");
  const cutPairs = new Set(), healPairs = new Set();
  for (const [k, l] of now) {
    const o = old.get(k);
    if (l.cut && !(o && o.cut)) cutPairs.add(pair(l));
    else if (!l.cut && o && o.cut) healPairs.add(pair(l));
    if (!o || o.latencyMs !== l.latencyMs || o.jitterMs !== l.jitterMs || o.loss !== l.loss) {
      if (l.latencyMs || l.jitterMs || l.loss || o) out.push("link " + k + " " + l.latencyMs + "ms");
    }
  }
  for (const [k, o] of old) {
    if (!now.has(k)) {
      if (o.cut) healPairs.add(pair(o));
      out.push("link " + k + " cleared");
    }
  }
  for (const p of cutPairs) out.unshift("cut " + p);
  for (const p of healPairs) out.unshift("heal " + p);
  const paused = new Set(after.paused || []), was = new Set(before.paused || []);
  for (const n of paused) if (!was.has(n)) out.push("pause " + n);
  for (const n of was) if (!paused.has(n)) out.push("resume " + n);
  return [...new Set(out)];
}

async function sample() {
  if (sampling) return;
  sampling = true;
  try {
    const now = Date.now();
    const report = await api("/understudy/v1/cluster/nodes");
    const lag = {}, r2v = {};
    for (const n of report.nodes) {
      const s = n.status;
      if (!s) continue;
      const dc = s.dc || n.dc;
      if (s.viewLagMs != null) lag[dc] = Math.max(lag[dc] ?? 0, s.viewLagMs);
      if (s.registerToVisible && s.registerToVisible.count) r2v[dc] = Math.max(r2v[dc] ?? 0, s.registerToVisible.p99Ms);
    }
    samples.push({ t: now, lag, r2v });
    try {
      const faults = (await api("/understudy/v1/chaos")).faults;
      if (lastFaults) {
        for (const label of faultChanges(lastFaults, faults)) faultMarks.push({ t: now, label });
      }
      lastFaults = faults;
    } catch (_) { /* not an admin: no fault marks */ }
    while (samples.length && samples[0].t < now - LAG_WINDOW_MS) samples.shift();
    while (faultMarks.length && faultMarks[0].t < now - LAG_WINDOW_MS) faultMarks.shift();
    window.lagSamples = samples.length;
  } finally {
    sampling = false;
  }
}

const SERIES_COLOURS = ["#2f6fde", "#d64545", "#1f9d55", "#c98a0c", "#7b4fd6", "#0f8b8d"];

// One chart: a line per DC of `field` over the sampled window, with every
// fault change marked on the time axis.
function lagChart(id, title, field) {
  const W = 1000, H = 220, L = 56, R = 16, T = 24, B = 30;
  if (samples.length < 2) {
    return `<div class="card chart"><h2>${esc(title)}</h2><p class="muted">Sampling…</p></div>`;
  }
  const t0 = samples[0].t, t1 = samples[samples.length - 1].t;
  const dcs = [...new Set(samples.flatMap((s) => Object.keys(s[field])))].sort();
  const max = Math.max(1, ...samples.flatMap((s) => Object.values(s[field])));
  const x = (t) => L + (W - L - R) * (t - t0) / Math.max(1, t1 - t0);
  const y = (v) => H - B - (H - B - T) * v / max;
  const series = dcs.map((dc, i) => {
    const points = samples.filter((s) => s[field][dc] != null)
      .map((s) => x(s.t).toFixed(1) + "," + y(s[field][dc]).toFixed(1)).join(" ");
    return `<g class="series" data-dc="${esc(dc)}"><polyline fill="none" stroke="${SERIES_COLOURS[i % SERIES_COLOURS.length]}" stroke-width="2" points="${points}"/></g>`;
  }).join("");
  const marks = faultMarks.filter((m) => m.t >= t0).map((m) => `
    <g class="marker" data-action="${esc(m.label)}"><line x1="${x(m.t).toFixed(1)}" x2="${x(m.t).toFixed(1)}" y1="${T}" y2="${H - B}" stroke="#18202c" stroke-dasharray="4 3"/>
    <text x="${(x(m.t) + 3).toFixed(1)}" y="${T + 10}" font-size="11">${esc(m.label)}</text></g>`).join("");
  const ticks = [0, 0.5, 1].map((f) => `<text x="${L - 6}" y="${y(max * f) + 4}" font-size="11" text-anchor="end">${Math.round(max * f)} ms</text>
    <line x1="${L}" x2="${W - R}" y1="${y(max * f)}" y2="${y(max * f)}" stroke="#dde2ea"/>`).join("");
  const span = Math.round((t1 - t0) / 1000);
  const legend = dcs.map((dc, i) => `<span class="legend"><span class="swatch" style="background:${SERIES_COLOURS[i % SERIES_COLOURS.length]}"></span>${esc(dc)}</span>`).join("");
  return `<div class="card chart"><h2>${esc(title)}</h2>
    <svg id="${id}" viewBox="0 0 ${W} ${H}" width="100%" role="img" aria-label="${esc(title)}">
      ${ticks}${series}${marks}
      <text x="${L}" y="${H - 8}" font-size="11">${span} s ago</text>
      <text x="${W - R}" y="${H - 8}" font-size="11" text-anchor="end">now</text>
    </svg><div>${legend}</div></div>`;
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
      const section = ["config", "history"].includes(view) ? "configs" : view;
      for (const name of ["registry", "configs", "cluster", "chaos"]) {
        document.getElementById("nav-" + name).classList.toggle("active", name === section);
      }
      const message = flash;
      flash = null;
      try {
        let html;
        if (view === "cluster") html = await renderCluster();
        else if (view === "chaos") html = await renderChaos();
        else if (view === "configs") html = await renderConfigs(params, message && message.text);
        else if (view === "config") html = await renderConfig(params, message);
        else if (view === "history") html = await renderHistory(params, message);
        else html = await renderRegistry(params);
        main.innerHTML = html;
        main.dataset.view = view;
        main.dataset.rendered = String(Date.now());
        const ns = document.getElementById("ns");
        if (ns) ns.onchange = () => { location.hash = link("registry", { ns: ns.value }); };
        bindChaos();
        bindConfigs(params);
        bindConfig();
        bindHistory();
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
// The cluster view's charts: a sample a second, whatever the view (so the
// charts have history when opened), and the cluster view drawn again.
setInterval(async () => {
  if (!loginForm.hidden) return;
  try { await sample(); } catch (_) { return; }
  if (route().view === "cluster") render();
}, 1000);
