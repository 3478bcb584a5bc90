// AgentStation playground: plain JavaScript over the /v1 API (docs/api.md, docs/playground.md).
import { api, apiError, ApiError, authHeaders, sleep, sseFrames, store } from "./api.js";
import { $, ACTIVE, ENDS, EV, V, ui } from "./common.js";
import {
  editAgent, fillModelSelect, fillSelect, hooks, newAgent, saveAgent, setView, showVersion,
  syncKind,
} from "./editor.js";
import { versionHooks } from "./versions.js";
import { showTools, wireTools } from "./tools.js";
import { renderSessions, setTitle, titleFrom, titleOf } from "./sessions.js";
import { loadRunChoices, refreshTimeline } from "./timeline-tab.js";
import { clearApprovals, renderApproval } from "./approvals.js";
import { bubble, note, renderHistory, renderMessage, scrollDown, text } from "./transcript.js";
import { showCode } from "./code.js";

const WAITING = V.statuses.REQUIRES_ACTION;  // a run waiting for a person (approvals)

// ---------------------------------------------------------------- connection and lists

function setConn(text, cls) {
  const el = $("conn");
  el.textContent = text;
  el.className = "conn " + (cls || "");
}

// ``asked``: the user submitted a key (a 401 is then their key's fault, shown in red); on a
// first visit without a key the page only asks for one.
async function connect(asked) {
  try {
    const [agents, models] = await Promise.all([
      api("GET", "/v1/agents?limit=100"), api("GET", "/v1/models"),
    ]);
    ui.agents = agents.data;
    ui.models = models.data.filter((m) => m.kind === "model").map((m) => m.id);
    ui.connected = true;
    setConn("connected · " + ui.agents.length + " agents", "ok");
    renderAgents();
    fillModelSelect();
    syncComposer();
    const saved = store.get("agent");
    if (saved && ui.agents.some((a) => a.name === saved)) await selectAgent(saved);
    else {
      if (!ui.editing) newAgent();
      goTo("agents");
    }
  } catch (err) {
    ui.agents = [];
    ui.connected = false;
    renderAgents();
    syncComposer();
    if (err.status === 401 && !asked && !store.get("key")) {
      setConn("enter your API key", "ask");
      $("api-key").focus();
    } else {
      setConn(err.status === 401 ? "invalid or missing API key" : "error: " + err.message, "bad");
    }
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
               a.name === ui.agent,
               () => selectAgent(a.name).then(() => goTo("sessions")).catch((e) => note(e.message)))));
}

async function selectAgent(name) {
  ui.agent = name;
  store.set("agent", name);
  renderAgents();
  const agent = ui.agents.find((a) => a.name === name);
  if (agent) editAgent(agent);
  $("session-new").disabled = false;
  syncComposer();
  await loadSessions();
}

const sessionHandlers = {
  select: (id) => selectSession(id).then(() => goTo("chat")).catch((e) => note(e.message)),
  deleted: (id) => {
    if (id !== ui.session) return;
    detachRun();
    ui.session = null;
    store.set("session", null);
    $("chat-title").textContent = "";
    $("transcript").replaceChildren();
    setRunBar(null);
    setComposer(false);
  },
  error: (message) => note(message),
};

async function loadSessions() {
  if (!ui.agent) { ui.sessions = []; renderSessions(sessionHandlers); return; }
  const epoch = ++ui.sessionsEpoch;
  const page = await api("GET", "/v1/sessions?limit=50&agent=" + encodeURIComponent(ui.agent));
  // A later load, a rename or a delete came after this request left: its answer is stale.
  if (epoch !== ui.sessionsEpoch) return;
  ui.sessions = page.data;
  renderSessions(sessionHandlers);
  const saved = store.get("session");
  if (!ui.session && saved && page.data.some((s) => s.id === saved)) await selectSession(saved);
}

function showChatTitle() {
  const s = ui.sessions.find((x) => x.id === ui.session);
  $("chat-title").textContent = ui.session ? "· " + ui.agent + " / " + (s ? titleOf(s) : ui.session) : "";
  $("chat-title").title = ui.session || "";
}

async function newSession() {
  if (!ui.agent) return;
  const s = await api("POST", "/v1/sessions", { agent: ui.agent });
  ui.session = null;
  goTo("chat");
  await selectSession(s.id);
  $("composer-input").focus();
}

async function selectSession(id) {
  detachRun();
  ui.session = id;
  ui.timelineRun = null;
  store.set("session", id);
  await loadSessions();
  showChatTitle();
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
  } else if (last && last.status === WAITING && last.required_action) {
    const run = newRun(last.id);  // waiting for a decision: ask for it again
    run.status = last.status;
    askApproval(run, last.required_action.tool_calls);
  }
  if (!$("pane-timeline").hidden) await loadRunChoices();
  if (!$("pane-code").hidden) showCode();
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
  const run = {
    id, lastEventId: null, status: null, bubbles: {}, reader: null, detached: false,
    spent: { prompt_tokens: 0, completion_tokens: 0 },  // from message events, while it runs
    frames: [],  // its events but deltas (the timeline), from the first one when complete
  };
  ui.run = run;
  return run;
}

function detachRun() {
  clearApprovals();
  const run = ui.run;
  if (!run) return;
  run.detached = true;
  if (run.reader) run.reader.cancel().catch(() => {});
  ui.run = null;
}

function setRunBar(run) {
  ui.shownRun = run && run.id ? run.id : null;  // the run on the screen (View code)
  const badge = $("run-status");
  badge.textContent = run ? run.status : "no run";
  badge.dataset.status = run ? run.status : "";
  showUsage(run);
  $("run-id").textContent = run ? run.id.slice(0, 12) + "…" : "";
  $("run-id").title = run ? run.id : "";
  const active = Boolean(run && ACTIVE.has(run.status));
  const waiting = Boolean(run && run.status === WAITING);  // for a person's decision
  $("cancel").disabled = !active && !waiting;
  $("send").disabled = active || waiting || !ui.session;
  syncComposer();
}

// A run's usage when it is known: the run's own once it stopped; while it runs, the tokens
// its model calls reported so far (message events), never a "0 + 0" that only means "not yet".
function showUsage(run) {
  const el = $("run-usage");
  let label = "";
  let title = "";
  const u = run && run.usage;
  const live = ui.run && run && ui.run.id === run.id ? ui.run.spent : null;
  if (run && ACTIVE.has(run.status)) {
    if (live && live.prompt_tokens + live.completion_tokens > 0) {
      label = live.prompt_tokens + " in + " + live.completion_tokens + " out so far";
      title = "tokens of the model calls that ended so far";
    }
  } else if (u && u.total_tokens > 0) {
    label = u.prompt_tokens + " in + " + u.completion_tokens + " out = " + u.total_tokens + " tokens";
    title = "usage: prompt, completion and total tokens";
  }
  el.textContent = label;
  el.title = title;
}

function setComposer(enabled) {
  $("composer-input").disabled = !enabled;
  $("send").disabled = !enabled;
  syncComposer();
}

// The message box says what the page waits for.
function syncComposer() {
  const status = $("run-status").dataset.status;
  let hint;
  if (!ui.connected) hint = "Enter your API key above first";
  else if (!ui.agent) hint = "Pick an agent, or create one with New";
  else if (!ui.session) hint = "Pick a session of " + ui.agent + ", or start one with New";
  else if (status === WAITING) hint = "A tool call waits for your decision (above)";
  else if (ACTIVE.has(status)) hint = ui.agent + " is answering… (Esc cancels)";
  else hint = "Message " + ui.agent + " (Enter sends, Shift+Enter: new line)";
  $("composer-input").placeholder = hint;
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
      if (d.usage) {
        run.spent.prompt_tokens += d.usage.prompt_tokens;
        run.spent.completion_tokens += d.usage.completion_tokens;
        showUsage({ id: run.id, status: run.status || V.statuses.RUNNING });
      }
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
    case EV.RUN_REQUIRES_ACTION: {
      run.status = d.run.status;
      setRunBar(d.run);
      for (const el of Object.values(run.bubbles)) el.classList.remove("streaming");
      askApproval(run, d.tool_calls || []);
      break;
    }
    case EV.ERROR:
      note("stream error: " + (d.error ? d.error.message : text(d)));
      break;
    default:
      note("event " + frame.event + ": " + text(frame.data));
  }
}

// A waiting run's calls, shown where the user sees them; decided, the run goes on.
function askApproval(run, calls) {
  run.calls = calls;
  goTo("chat");
  renderApproval(calls, (decisions) => resume(run, calls, decisions));
}

async function resume(run, calls, decisions) {
  clearApprovals();
  run.calls = [];
  try {
    const resp = await fetch("/v1/runs/" + encodeURIComponent(run.id) + "/resume", {
      method: "POST",
      headers: { ...authHeaders(), "Content-Type": "application/json" },
      body: JSON.stringify({ decisions, stream: true, on_disconnect: "continue" }),
    });
    if (!resp.ok) throw await apiError(resp);
    run.status = V.statuses.QUEUED;
    setRunBar(run);
    await followRun(run, resp);
  } catch (err) {
    note("the decision was not taken: " + err.message);
    if (err instanceof ApiError && err.status === 422) askApproval(run, calls);  // fix it
  }
}

// Read frames until the run's final event; true when it came.
async function readEvents(run, resp) {
  for await (const frame of sseFrames(resp, run)) {
    if (frame.id) {
      run.lastEventId = frame.id;
      store.set("lastEventId." + run.id, frame.id);
    }
    handleEvent(run, frame);
    if (frame.event !== EV.MESSAGE_DELTA) {
      run.frames.push(frame);
      refreshTimeline();
    }
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
    if (!$("pane-timeline").hidden) await loadRunChoices().catch(() => {});
    if (!$("pane-code").hidden) showCode();
  }
}

async function send(message) {
  if (!ui.session || !message.trim()) return;
  detachRun();
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
    nameAfter(ui.session, message);
    ui.timelineRun = null;
    if (!$("pane-timeline").hidden) loadRunChoices().catch(() => {});
    if (!$("pane-code").hidden) showCode();
    await followRun(run, resp);
  } catch (err) {
    note("could not send: " + err.message);
    setRunBar(null);
  }
}

// A session without a title is named by its first message (PATCH of its metadata).
function nameAfter(id, message) {
  const s = ui.sessions.find((x) => x.id === id);
  if (!s || titleOf(s) !== s.id) return;
  setTitle(id, titleFrom(message))
    .then(() => { renderSessions(sessionHandlers); showChatTitle(); })
    .catch((err) => note("could not name the session: " + err.message));
}

async function cancelRun() {
  const run = ui.run;
  if (!run || !run.id || !(ACTIVE.has(run.status) || run.status === WAITING)) return;
  $("cancel").disabled = true;
  try {
    const cancelled = await api("POST", "/v1/runs/" + encodeURIComponent(run.id) + "/cancel");
    if (run.status === WAITING) {  // nothing streams: the answer is the run's end
      clearApprovals();
      run.status = cancelled.status;
      note("run " + cancelled.status);
    }
    setRunBar(cancelled);
  } catch (err) {
    note("cancel failed: " + err.message);
  }
}

// For tests and the curious: drop the live stream as a network failure would.
function dropStream() {
  if (ui.run && ui.run.reader) ui.run.reader.cancel().catch(() => {});
}

// ---------------------------------------------------------------- tabs and keys

// Narrow screens (the switcher shows) see one panel at a time; wide ones see them all.
const NARROW = window.matchMedia("(max-width: 760px)");

function showPanel(name) {
  $("grid").dataset.view = name;
  for (const b of $("views").querySelectorAll("button")) {
    b.setAttribute("aria-pressed", String(b.dataset.panel === name));
  }
}

// After an action, go where its result is (only when one panel shows at a time).
function goTo(name) {
  if (NARROW.matches) showPanel(name);
}

const TABS = ["agent", "memory", "timeline", "code"];

function showTab(name) {
  for (const tab of TABS) {
    const on = tab === name;
    $("tab-" + tab).setAttribute("aria-selected", String(on));
    $("tab-" + tab).tabIndex = on ? 0 : -1;
    $("pane-" + tab).hidden = !on;
  }
  if (name === "memory") refreshMemory().catch(() => {});
  if (name === "timeline") loadRunChoices().catch((e) => note(e.message));
  if (name === "code") showCode();
}

hooks.showTab = showTab;
versionHooks.show = showVersion;
versionHooks.rolledBack = (saved) => hooks.afterSave(saved);
hooks.afterSave = async (saved) => {
  ui.agents = (await api("GET", "/v1/agents?limit=100")).data;
  setConn("connected · " + ui.agents.length + " agents", "ok");
  ui.session = null;
  await selectAgent(saved.name);
};

function wire() {
  $("api-key").value = store.get("key") || "";
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    store.set("key", $("api-key").value.trim() || null);
    ui.agent = null;
    ui.session = null;
    connect(true);
  });
  $("agent-new").addEventListener("click", () => {
    newAgent();
    goTo("inspector");
    $("f-name").focus();
  });
  for (const b of $("views").querySelectorAll("button")) {
    b.addEventListener("click", () => showPanel(b.dataset.panel));
  }
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
  $("f-kind").addEventListener("change", syncKind);
  $("view-form").addEventListener("click", () => setView(false));
  $("view-json").addEventListener("click", () => setView(true));
  $("memory-refresh").addEventListener("click", () => refreshMemory().catch((e) => note(e.message)));
  TABS.forEach((tab, i) => {
    $("tab-" + tab).addEventListener("click", () => showTab(tab));
    $("tab-" + tab).addEventListener("keydown", (e) => {
      if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
        const other = TABS[(i + (e.key === "ArrowRight" ? 1 : TABS.length - 1)) % TABS.length];
        showTab(other);
        $("tab-" + other).focus();
      }
    });
  });
  $("timeline-run").addEventListener("change", () => {
    ui.timelineRun = $("timeline-run").value || null;
    refreshTimeline().catch((e) => note(e.message));
  });
  fillSelect($("f-kind"), V.kinds, "agent");
  wireTools();
  showTools({});
  syncKind();
}

window.playground = { dropStream, reloadSessions: loadSessions, state: ui };
wire();
connect();
