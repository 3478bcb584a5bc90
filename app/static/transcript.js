// The conversation: a bubble per message (the user's, the agent's text, a tool call and its
// code, a tool result and its output), notes, and a session's history from its memory.
import { $, classify } from "./common.js";

export function bubble(kind, who) {
  // A session's first message (sent, or replayed from a run after a reload) ends "No messages".
  if (kind !== "note") for (const n of $("transcript").querySelectorAll(".msg-item.empty")) n.remove();
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

export function scrollDown() {
  const t = $("transcript");
  t.scrollTop = t.scrollHeight;
}

export function note(text) {
  const el = bubble("note", "");
  el.querySelector(".body").textContent = text;
  return el;
}

export function text(content) {
  return typeof content === "string" ? content : JSON.stringify(content, null, 2);
}

function pre(content) {
  const p = document.createElement("pre");
  p.textContent = content;
  return p;
}

// Fill ``el`` (a bubble) with ``message`` rendered by its kind.
export function renderMessage(el, message) {
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

export function renderHistory(state) {
  const t = $("transcript");
  t.replaceChildren();
  const key = "memory" in state ? "memory" : Object.keys(state)[0];
  const messages = (state && state[key]) || [];
  for (const m of messages) renderMessage(bubble("assistant", ""), m);
  if (!messages.length) note("No messages yet. Say something.").classList.add("empty");
}
