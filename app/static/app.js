// AgentStation playground: plain JavaScript over the /v1 API (docs/api.md, docs/playground.md).
// Streams use fetch + ReadableStream (EventSource cannot send the Authorization header).
"use strict";

const V = window.AGENTSTATION; // event types, run statuses, kinds, tools (app/api/playground.py)
const EV = V.events;
const ENDS = new Set(V.endsStream);
const ACTIVE = new Set(V.active);
const $ = (id) => document.getElementById(id);
const store = {
  get: (k) => localStorage.getItem("agentstation." + k),
  set: (k, v) => (v == null ? localStorage.removeItem("agentstation." + k)
                            : localStorage.setItem("agentstation." + k, v)),
};

const ui = {
  agents: [],          // GET /v1/agents
  models: [],          // raw model names (GET /v1/models, kind "model")
  agent: null,         // the selected agent's name
  session: null,       // the selected session's id
  editing: null,       // the agent being edited (null: a new one)
  run: null,           // the followed run: {id, lastEventId, status, bubbles, reader, detached}
};

// ---------------------------------------------------------------- HTTP

class ApiError extends Error {
  constructor(status, message, code) { super(message); this.status = status; this.code = code; }
}

function authHeaders() {
  const key = store.get("key");
  return key ? { Authorization: "Bearer " + key } : {};
}

async function api(method, path, body, extra) {
  const headers = { ...authHeaders(), ...(extra || {}) };
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (!resp.ok) throw await apiError(resp);
  return resp.status === 204 ? null : resp.json();
}

async function apiError(resp) {
  let message = resp.status + " " + resp.statusText;
  let code = null;
  try {
    const err = (await resp.json()).error;
    if (err) { message = err.message; code = err.code; }
  } catch (_) { /* not JSON */ }
  return new ApiError(resp.status, message, code);
}

// Server-sent events from a fetch response: {id, event, data} per frame; comments skipped.
async function* sseFrames(resp, run) {
  const reader = resp.body.getReader();
  run.reader = reader;
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer = (buffer + decoder.decode(value, { stream: true })).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = parseFrame(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (frame) yield frame;
      }
    }
  } finally {
    run.reader = null;
  }
}

function parseFrame(block) {
  const frame = { id: null, event: "message", data: "" };
  let hasData = false;
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const at = line.indexOf(":");
    const field = at < 0 ? line : line.slice(0, at);
    let value = at < 0 ? "" : line.slice(at + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") frame.id = value;
    else if (field === "event") frame.event = value;
    else if (field === "data") { frame.data += (hasData ? "\n" : "") + value; hasData = true; }
  }
  if (!hasData) return null;
  try { frame.data = JSON.parse(frame.data); } catch (_) { /* keep the text */ }
  return frame;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- connection and lists

function setConn(text, cls) {
  const el = $("conn");
  el.textContent = text;
  el.className = "conn " + (cls || "");
}

async function connect() {
  try {
    const [agents, models] = await Promise.all([
      api("GET", "/v1/agents?limit=100"), api("GET", "/v1/models"),
    ]);
    ui.agents = agents.data;
    ui.models = models.data.filter((m) => m.kind === "model").map((m) => m.id);
    setConn("connected · " + ui.agents.length + " agents", "ok");
    renderAgents();
    fillModelSelect();
    const saved = store.get("agent");
    if (saved && ui.agents.some((a) => a.name === saved)) await selectAgent(saved);
    else if (!ui.editing) newAgent();
  } catch (err) {
    setConn(err.status === 401 ? "invalid or missing API key" : "error: " + err.message, "bad");
    ui.agents = [];
    renderAgents();
  }
}

function listButton(label, sub, current, onClick) {
  const li = document.createElement("li");
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  if (sub) {
    const s = document.createElement("small");
    s.textContent = sub;
    b.appendChild(s);
  }
  b.setAttribute("aria-current", current ? "true" : "false");
  b.addEventListener("click", onClick);
  li.appendChild(b);
  return li;
}

function renderAgents() {
  const list = $("agent-list");
  list.replaceChildren(...ui.agents.map((a) =>
    listButton(a.name, a.spec.kind + " · " + (a.spec.model || "—") + " · v" + a.version,
               a.name === ui.agent, () => selectAgent(a.name))));
}

async function selectAgent(name) {
  ui.agent = name;
  store.set("agent", name);
  renderAgents();
  const agent = ui.agents.find((a) => a.name === name);
  if (agent) editAgent(agent);
  $("session-new").disabled = false;
  await loadSessions();
}

async function loadSessions() {
  const list = $("session-list");
  if (!ui.agent) { list.replaceChildren(); return; }
  const page = await api("GET", "/v1/sessions?limit=50&agent=" + encodeURIComponent(ui.agent));
  list.replaceChildren(...page.data.map((s) =>
    listButton(s.id, new Date(s.created_at).toLocaleString(),
               s.id === ui.session, () => selectSession(s.id))));
  const saved = store.get("session");
  if (!ui.session && saved && page.data.some((s) => s.id === saved)) await selectSession(saved);
}

async function newSession() {
  if (!ui.agent) return;
  const s = await api("POST", "/v1/sessions", { agent: ui.agent });
  ui.session = null;
  await selectSession(s.id);
  $("composer-input").focus();
}

async function selectSession(id) {
  detachRun();
  ui.session = id;
  store.set("session", id);
  $("chat-title").textContent = "· " + ui.agent + " / " + id;
  await loadSessions();
  const history = await api("GET", "/v1/sessions/" + encodeURIComponent(id) + "/memory");
  renderHistory(history);
  showMemory(history);
  setComposer(true);
  const runs = await api("GET", "/v1/sessions/" + encodeURIComponent(id) + "/runs?limit=1");
  const last = runs.data[0];
  setRunBar(last || null);
  if (last && ACTIVE.has(last.status)) {
    // A run still going (after a reload, say): replay its events so far, then follow it.
    const run = newRun(last.id);
    run.lastEventId = "0";
    followRun(run);
  }
}

// ---------------------------------------------------------------- transcript

function bubble(kind, who) {
  const el = document.createElement("div");
  el.className = "msg-item " + kind;
  const w = document.createElement("div");
  w.className = "who";
  w.textContent = who;
  const body = document.createElement("div");
  body.className = "body";
  el.append(w, body);
  $("transcript").appendChild(el);
  scrollDown();
  return el;
}

function scrollDown() {
  const t = $("transcript");
  t.scrollTop = t.scrollHeight;
}

function note(text) {
  const el = bubble("note", "");
  el.querySelector(".body").textContent = text;
  return el;
}

function text(content) {
  return typeof content === "string" ? content : JSON.stringify(content, null, 2);
}

// What a complete message is: the user's, a tool call, a tool result, or the agent's text.
function classify(message) {
  const f = message.formatted;
  if (message.sender === "user") return "user";
  if (f && typeof f === "object" && f.action && f.action.name) return "tool-call";
  if (f && typeof f === "object" && ("result" in f || "errmsg" in f) && "type" in f) {
    return "tool-result";
  }
  return "assistant";
}

function pre(content) {
  const p = document.createElement("pre");
  p.textContent = content;
  return p;
}

// Fill ``el`` (a bubble) with ``message`` rendered by its kind.
function renderMessage(el, message) {
  const kind = classify(message);
  el.className = "msg-item " + kind;
  const who = el.querySelector(".who");
  const body = el.querySelector(".body");
  body.replaceChildren();
  const f = message.formatted;
  if (kind === "tool-call") {
    who.textContent = message.sender + " calls " + f.action.name;
    const params = f.action.parameters || {};
    const code = params.command || params.code;
    if (f.thought) body.appendChild(document.createTextNode(f.thought));
    body.appendChild(pre(typeof code === "string" ? code : text(params)));
  } else if (kind === "tool-result") {
    const failed = Boolean(f.errmsg) || (f.state !== undefined && f.state !== 0);
    if (failed) el.classList.add("error");
    who.textContent = (f.type || "tool") + (failed ? " failed" : " result");
    const parts = (f.result || []).map((r) => (typeof r === "object" ? text(r.content) : text(r)));
    if (f.errmsg) parts.push(f.errmsg);
    body.appendChild(pre(parts.join("\n") || text(message.content)));
  } else {
    who.textContent = message.sender || "agent";
    body.textContent = text(message.content);
  }
  scrollDown();
}

function renderHistory(state) {
  const t = $("transcript");
  t.replaceChildren();
  const key = "memory" in state ? "memory" : Object.keys(state)[0];
  const messages = (state && state[key]) || [];
  for (const m of messages) renderMessage(bubble("assistant", ""), m);
  if (!messages.length) note("No messages yet. Say something.");
}

function showMemory(state) {
  $("memory-view").textContent = JSON.stringify(state, null, 2);
}

async function refreshMemory() {
  if (!ui.session) return;
  showMemory(await api("GET", "/v1/sessions/" + encodeURIComponent(ui.session) + "/memory"));
}

// ---------------------------------------------------------------- runs

function newRun(id) {
  const run = { id, lastEventId: null, status: null, bubbles: {}, reader: null, detached: false };
  ui.run = run;
  return run;
}

function detachRun() {
  const run = ui.run;
  if (!run) return;
  run.detached = true;
  if (run.reader) run.reader.cancel().catch(() => {});
  ui.run = null;
}

function setRunBar(run) {
  const badge = $("run-status");
  badge.textContent = run ? run.status : "no run";
  badge.dataset.status = run ? run.status : "";
  const u = run && run.usage;
  $("run-usage").textContent = u
    ? u.prompt_tokens + " in + " + u.completion_tokens + " out = " + u.total_tokens + " tokens"
    : "";
  $("run-usage").title = u ? "usage: prompt, completion and total tokens" : "";
  $("run-id").textContent = run ? run.id.slice(0, 12) + "…" : "";
  $("run-id").title = run ? run.id : "";
  const active = Boolean(run && ACTIVE.has(run.status));
  $("cancel").disabled = !active;
  $("send").disabled = active || !ui.session;
}

function setComposer(enabled) {
  $("composer-input").disabled = !enabled;
  $("send").disabled = !enabled;
}

function handleEvent(run, frame) {
  const d = frame.data;
  switch (frame.event) {
    case EV.RUN_CREATED: {
      run.id = d.run.id;
      run.status = d.run.status;
      setRunBar(d.run);
      if (!run.sentText && d.run.input) renderMessage(bubble("user", "user"), d.run.input);
      break;
    }
    case EV.MESSAGE_DELTA: {
      let el = run.bubbles[d.index];
      if (!el) {
        el = run.bubbles[d.index] = bubble("assistant streaming", d.sender || "agent");
      }
      el.querySelector(".body").append(d.delta);
      scrollDown();
      break;
    }
    case EV.MESSAGE: {
      let el = run.bubbles[d.index];
      if (!el) el = run.bubbles[d.index] = bubble("assistant", "");
      renderMessage(el, d.message);
      break;
    }
    case EV.RUN_GAP:
      note("events " + d.from_id + "–" + d.to_id + " were lost (" + d.reason + ")");
      break;
    case EV.RUN_COMPLETED:
    case EV.RUN_FAILED:
    case EV.RUN_CANCELLED: {
      run.status = d.run.status;
      setRunBar(d.run);
      for (const el of Object.values(run.bubbles)) el.classList.remove("streaming");
      if (d.error) note("run failed: " + (d.error.message || text(d.error)));
      else if (frame.event === EV.RUN_CANCELLED) note("run " + d.run.status);
      break;
    }
    case EV.ERROR:
      note("stream error: " + (d.error ? d.error.message : text(d)));
      break;
    default:
      renderApproval(run, frame);
  }
}

// TODO(approvals): approvals are built in parallel; when their event (a tool call waiting for
// approval) arrives, render Approve / Deny / Edit buttons into #approvals here and POST the
// decision. Until then an unknown event is only shown as a note.
function renderApproval(run, frame) {
  note("event " + frame.event + ": " + text(frame.data));
}

// Read frames until the run's final event; true when it came.
async function readEvents(run, resp) {
  for await (const frame of sseFrames(resp, run)) {
    if (frame.id) {
      run.lastEventId = frame.id;
      store.set("lastEventId." + run.id, frame.id);
    }
    handleEvent(run, frame);
    if (ENDS.has(frame.event)) return true;
  }
  return false;
}

// Follow a run to its end, resuming a dropped stream with Last-Event-ID.
async function followRun(run, firstResponse) {
  let resp = firstResponse || null;
  let delay = 250;
  for (let attempt = 0; !run.detached; attempt++) {
    try {
      if (!resp) {
        const headers = { ...authHeaders() };
        if (run.lastEventId != null) headers["Last-Event-ID"] = run.lastEventId;
        resp = await fetch("/v1/runs/" + encodeURIComponent(run.id) + "/events", { headers });
        if (!resp.ok) throw await apiError(resp);
        if (attempt > 0) note("stream resumed after event " + run.lastEventId);
      }
      const ended = await readEvents(run, resp);
      resp = null;
      if (ended) break;
    } catch (err) {
      resp = null;
      if (err instanceof ApiError && err.status < 500) { note("cannot follow the run: " + err.message); break; }
    }
    if (run.detached) return;
    note("stream dropped; resuming from event " + run.lastEventId + "…");
    await sleep(delay);
    delay = Math.min(delay * 2, 5000);
  }
  if (!run.detached) {
    store.set("lastEventId." + run.id, null);
    await Promise.all([refreshMemory(), loadSessions()]).catch(() => {});
  }
}

async function send(message) {
  if (!ui.session || !message.trim()) return;
  detachRun();
  const transcript = $("transcript");
  if (transcript.querySelector(".note") && transcript.children.length === 1) transcript.replaceChildren();
  renderMessage(bubble("user", "user"), { sender: "user", content: message });
  $("composer-input").value = "";
  $("send").disabled = true;
  const run = newRun(null);
  run.sentText = message;
  try {
    const resp = await fetch("/v1/sessions/" + encodeURIComponent(ui.session) + "/messages", {
      method: "POST",
      headers: { ...authHeaders(), "Content-Type": "application/json" },
      // continue: a dropped connection leaves the run going; the page resumes its events.
      body: JSON.stringify({ message, stream: true, on_disconnect: "continue" }),
    });
    if (!resp.ok) throw await apiError(resp);
    const where = resp.headers.get("Content-Location");
    if (where) run.id = where.split("/").pop();
    await followRun(run, resp);
  } catch (err) {
    note("could not send: " + err.message);
    setRunBar(null);
  }
}

async function cancelRun() {
  const run = ui.run;
  if (!run || !run.id || !ACTIVE.has(run.status)) return;
  $("cancel").disabled = true;
  try {
    setRunBar(await api("POST", "/v1/runs/" + encodeURIComponent(run.id) + "/cancel"));
  } catch (err) {
    note("cancel failed: " + err.message);
  }
}

// For tests and the curious: drop the live stream as a network failure would.
function dropStream() {
  if (ui.run && ui.run.reader) ui.run.reader.cancel().catch(() => {});
}

// ---------------------------------------------------------------- agent editor

const FORM_KEYS = ["kind", "model", "system_prompt", "gen_params", "tools", "max_turn"];

function fillSelect(select, values, current) {
  const opts = [...values];
  if (current && !opts.includes(current)) opts.push(current);
  select.replaceChildren(...opts.map((v) => {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = v;
    return o;
  }));
  if (current) select.value = current;
}

function fillModelSelect() {
  fillSelect($("f-model"), ui.models, $("f-model").value || ui.models[0]);
}

function toolBoxes(selected) {
  const box = $("f-tools");
  const legend = box.querySelector("legend");
  box.replaceChildren(legend, ...V.tools.map((name) => {
    const label = document.createElement("label");
    const input = document.createElement("input");
    input.type = "checkbox";
    input.value = name;
    input.checked = selected.includes(name);
    label.append(input, name);
    return label;
  }));
}

function numberOrNull(id) {
  const v = $(id).value;
  return v === "" ? null : Number(v);
}

// The form's agent: {name, description, spec}; spec keys the form lacks are kept as loaded.
function formAgent() {
  const base = ui.formBase || {};
  const spec = { ...base };
  for (const k of FORM_KEYS) delete spec[k];
  spec.kind = $("f-kind").value;
  spec.model = $("f-model").value;
  const system = $("f-system").value;
  if (system) spec.system_prompt = system;
  const gen = { ...(base.gen_params || {}) };
  const temperature = numberOrNull("f-temperature");
  const maxTokens = numberOrNull("f-max-tokens");
  if (temperature === null) delete gen.temperature; else gen.temperature = temperature;
  if (maxTokens === null) delete gen.max_new_tokens; else gen.max_new_tokens = maxTokens;
  if (Object.keys(gen).length) spec.gen_params = gen;
  const checked = [...$("f-tools").querySelectorAll("input:checked")].map((i) => i.value);
  const oldTools = base.tools || [];
  if (checked.length) {
    spec.tools = checked.map((name) => oldTools.find((t) => t.name === name) || { name });
  }
  const maxTurn = numberOrNull("f-max-turn");
  if (maxTurn !== null) spec.max_turn = maxTurn;
  const out = { name: $("f-name").value.trim(), spec };
  const description = $("f-description").value;
  if (description) out.description = description;
  return out;
}

function fillForm(agent) {
  const spec = agent.spec || {};
  ui.formBase = spec;
  $("f-name").value = agent.name || "";
  $("f-description").value = agent.description || "";
  fillSelect($("f-kind"), V.kinds, spec.kind || "agent");
  fillSelect($("f-model"), ui.models, spec.model || ui.models[0]);
  $("f-system").value = spec.system_prompt || "";
  const gen = spec.gen_params || {};
  $("f-temperature").value = gen.temperature ?? "";
  $("f-max-tokens").value = gen.max_new_tokens ?? "";
  $("f-max-turn").value = spec.max_turn ?? "";
  toolBoxes((spec.tools || []).map((t) => t.name));
}

function editAgent(agent) {
  ui.editing = agent.name;
  fillForm(agent);
  if (jsonMode()) $("f-json").value = JSON.stringify(formAgent(), null, 2);
  $("agent-save").textContent = "Save version " + (agent.version + 1);
  $("agent-msg").textContent = "";
}

function newAgent() {
  ui.editing = null;
  fillForm({ name: "", spec: { kind: "agent", model: ui.models[0] } });
  if (jsonMode()) $("f-json").value = JSON.stringify(formAgent(), null, 2);
  $("agent-save").textContent = "Create agent";
  $("agent-msg").textContent = "";
  showTab("agent");
}

const jsonMode = () => !$("json-fields").hidden;

function setView(json) {
  const msg = $("agent-msg");
  if (json && !jsonMode()) {
    $("f-json").value = JSON.stringify(formAgent(), null, 2);
  } else if (!json && jsonMode()) {
    try {
      fillForm(JSON.parse($("f-json").value));
    } catch (err) {
      msg.textContent = "invalid JSON: " + err.message;
      msg.className = "msg bad";
      return;
    }
  }
  $("form-fields").hidden = json;
  $("json-fields").hidden = !json;
  $("view-form").setAttribute("aria-pressed", String(!json));
  $("view-json").setAttribute("aria-pressed", String(json));
}

async function saveAgent(event) {
  event.preventDefault();
  const msg = $("agent-msg");
  let agent;
  try {
    agent = jsonMode() ? JSON.parse($("f-json").value) : formAgent();
  } catch (err) {
    msg.textContent = "invalid JSON: " + err.message;
    msg.className = "msg bad";
    return;
  }
  try {
    let saved;
    if (ui.editing && ui.editing === agent.name) {
      const body = { spec: agent.spec };
      if (agent.description !== undefined) body.description = agent.description;
      saved = await api("PUT", "/v1/agents/" + encodeURIComponent(agent.name), body);
    } else {
      saved = await api("POST", "/v1/agents", agent);
    }
    msg.textContent = "saved " + saved.name + " v" + saved.version;
    msg.className = "msg ok";
    const agents = await api("GET", "/v1/agents?limit=100");
    ui.agents = agents.data;
    setConn("connected · " + ui.agents.length + " agents", "ok");
    ui.session = null;
    await selectAgent(saved.name);
    msg.textContent = "saved " + saved.name + " v" + saved.version;
    msg.className = "msg ok";
  } catch (err) {
    msg.textContent = err.message;
    msg.className = "msg bad";
  }
}

// ---------------------------------------------------------------- tabs and keys

function showTab(name) {
  for (const tab of ["agent", "memory"]) {
    const on = tab === name;
    $("tab-" + tab).setAttribute("aria-selected", String(on));
    $("tab-" + tab).tabIndex = on ? 0 : -1;
    $("pane-" + tab).hidden = !on;
  }
  if (name === "memory") refreshMemory().catch(() => {});
}

function wire() {
  $("api-key").value = store.get("key") || "";
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    store.set("key", $("api-key").value.trim() || null);
    ui.agent = null;
    ui.session = null;
    connect();
  });
  $("agent-new").addEventListener("click", () => { newAgent(); $("f-name").focus(); });
  $("session-new").addEventListener("click", () => newSession().catch((e) => note(e.message)));
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    if (!$("send").disabled) send($("composer-input").value);
  });
  $("composer-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (!$("send").disabled) send($("composer-input").value);
    }
  });
  $("cancel").addEventListener("click", cancelRun);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && !$("cancel").disabled) cancelRun();
  });
  $("agent-form").addEventListener("submit", saveAgent);
  $("view-form").addEventListener("click", () => setView(false));
  $("view-json").addEventListener("click", () => setView(true));
  $("memory-refresh").addEventListener("click", () => refreshMemory().catch((e) => note(e.message)));
  for (const tab of ["agent", "memory"]) {
    $("tab-" + tab).addEventListener("click", () => showTab(tab));
    $("tab-" + tab).addEventListener("keydown", (e) => {
      if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
        const other = tab === "agent" ? "memory" : "agent";
        showTab(other);
        $("tab-" + other).focus();
      }
    });
  }
  fillSelect($("f-kind"), V.kinds, "agent");
  toolBoxes([]);
}

window.playground = { dropStream, state: ui };
wire();
connect();
