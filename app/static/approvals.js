// Tool calls waiting for a person's decision, under the conversation: marked so they are not
// missed (style.css .approvals), with Approve, Deny (a reason the model reads) and Run edited.
import { $ } from "./common.js";
import { note } from "./transcript.js";

// A run waiting for approval (docs/approvals.md): each pending call with its arguments
// (editable) and Approve / Deny / Run edited; once every call has a decision, ``resume``
// gets them (app.js: POST /v1/runs/{id}/resume, then the page follows the run's next events).
// A user_proxy agent's question to the person (docs/approvals.md): its prompt and a reply box;
// Reply answers (edit {reply}), Leave ends the conversation (deny).
const HUMAN_INPUT = "human_input";

function replyRow(call, decide) {
  const row = document.createElement("div");
  row.className = "approval human-input";
  row.dataset.callId = call.id;
  const prompt = document.createElement("pre");
  prompt.className = "approval-prompt";
  prompt.textContent = (call.arguments && call.arguments.prompt) || "";
  const reply = document.createElement("textarea");
  reply.className = "approval-reply";
  reply.rows = 3;
  reply.placeholder = "your reply (Enter sends)";
  reply.setAttribute("aria-label", "your reply");
  const buttons = document.createElement("div");
  buttons.className = "approval-buttons";
  const send = () => decide(row, call.id, { action: "edit", arguments: { reply: reply.value } });
  const answer = document.createElement("button");
  answer.type = "button";
  answer.className = "approve reply";
  answer.textContent = "Reply";
  answer.addEventListener("click", send);
  reply.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  const leave = document.createElement("button");
  leave.type = "button";
  leave.className = "deny leave";
  leave.textContent = "Leave";
  leave.title = "End the conversation";
  leave.addEventListener("click", () => decide(row, call.id, { action: "deny", message: null }));
  buttons.append(answer, leave);
  row.append(prompt, reply, buttons);
  return row;
}

export function renderApproval(calls, resume) {
  const box = $("approvals");
  box.replaceChildren();
  if (!calls.length) { box.hidden = true; return; }
  const head = document.createElement("div");
  head.className = "approvals-head";
  const asks = calls.every((c) => c.name === HUMAN_INPUT);
  head.textContent = asks
    ? "The conversation waits for your reply"
    : calls.length === 1
      ? "This tool call waits for your approval"
      : calls.length + " tool calls wait for your approval";
  box.append(head);
  const decisions = {};
  const decide = (row, id, decision) => {
    decisions[id] = { id, ...decision };
    for (const b of row.querySelectorAll("button, textarea, input")) b.disabled = true;
    row.dataset.decided = decision.action;
    if (Object.keys(decisions).length === calls.length) resume(Object.values(decisions));
  };
  for (const call of calls) {
    if (call.name === HUMAN_INPUT) {
      box.append(replyRow(call, decide));
      continue;
    }
    const row = document.createElement("div");
    row.className = "approval";
    row.dataset.callId = call.id;
    const title = document.createElement("div");
    title.className = "approval-title";
    title.textContent = "⚙ " + call.name;
    const args = document.createElement("textarea");
    args.className = "approval-args mono";
    args.rows = Math.min(8, JSON.stringify(call.arguments, null, 2).split("\n").length);
    args.value = JSON.stringify(call.arguments, null, 2);
    args.setAttribute("aria-label", "arguments of " + call.name + " (edit, then Run edited)");
    const reason = document.createElement("input");
    reason.className = "approval-reason";
    reason.placeholder = "why not? (the model reads it)";
    reason.setAttribute("aria-label", "reason for a denial");
    const buttons = document.createElement("div");
    buttons.className = "approval-buttons";
    const button = (label, cls, onClick) => {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.className = cls;
      b.addEventListener("click", onClick);
      buttons.append(b);
      return b;
    };
    button("Approve", "approve", () => decide(row, call.id, { action: "approve" }));
    button("Deny", "deny", () => decide(row, call.id, { action: "deny", message: reason.value.trim() || null }));
    button("Run edited", "edit", () => {
      let edited;
      try {
        edited = JSON.parse(args.value);
      } catch (err) {
        note("the arguments are not JSON: " + err.message);
        return;
      }
      decide(row, call.id, { action: "edit", arguments: edited });
    });
    row.append(title, args, reason, buttons);
    box.append(row);
  }
  box.hidden = false;
  document.title = "⚠ Approval needed · AgentStation playground";
  (box.querySelector("textarea.approval-reply") || box.querySelector("button.approve")).focus();
}

export function clearApprovals() {
  document.title = "AgentStation playground";
  $("approvals").hidden = true;
  $("approvals").replaceChildren();
}
