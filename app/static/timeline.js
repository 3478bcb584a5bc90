// A run's timeline: a waterfall of its model calls, tool calls and waits, with durations and
// tokens, drawn from its events (a message event says when its step began, when its first
// chunk and its end came, and its model tokens: docs/api.md "Events").
import { apiError, authHeaders, sseFrames } from "./api.js";
import { $, classify, ENDS, EV } from "./common.js";

const ms = (iso) => (iso ? Date.parse(iso) : null);

export function duration(msec) {
  if (msec == null) return "…";
  if (msec < 1000) return Math.max(0, Math.round(msec)) + " ms";
  if (msec < 60_000) return (msec / 1000).toFixed(2) + " s";
  return Math.floor(msec / 60_000) + " min " + Math.round((msec % 60_000) / 1000) + " s";
}

const tokens = (u) => (u ? u.prompt_tokens + " in + " + u.completion_tokens + " out" : "");

// The steps of a run from its events but deltas: {steps, run, start, end, trace}.
// ``modelOf(sender)``: the model an agent's replies come from (for the labels), if known.
// ``agent``: the run's agent (its own replies need no name; a sub-agent's say whose they are).
export function stepsOf(frames, modelOf, agent) {
  const steps = [];
  let run = null;
  let start = null;
  let end = null;
  let waitFrom = null;
  let last = null;
  let trace = null;
  for (const f of frames) {
    const d = f.data || {};
    if (d.run) {
      run = d.run;
      agent = agent || d.run.agent;
      trace = d.run.trace_id || trace;
    }
    trace = d.trace_id || trace;
    if (f.event === EV.RUN_CREATED && d.run) {
      const created = ms(d.run.created_at);
      const started = ms(d.run.started_at);
      start = created;
      if (started && created && started - created >= 5) {
        steps.push({ kind: "queue", label: "queued", start: created, end: started });
      }
      last = started || created;
    } else if (f.event === EV.MESSAGE && d.at) {
      const from = ms(d.started_at);
      const to = ms(d.at);
      if (waitFrom != null) {
        steps.push({ kind: "wait", label: "waiting for approval", start: waitFrom, end: from });
        waitFrom = null;
      }
      const message = d.message || {};
      const kind = classify(message);
      const fmt = message.formatted || {};
      if (kind === "tool-result") {
        const failed = Boolean(fmt.errmsg) || (fmt.state !== undefined && fmt.state !== 0);
        steps.push({
          kind: "tool", label: "tool " + (fmt.type || "call") + (failed ? ": failed" : ""),
          start: from, end: to, failed,
        });
      } else if (kind !== "user") {
        const model = modelOf(message.sender);
        const what = kind === "tool-call" ? "calls " + fmt.action.name : "replies";
        const who = message.sender && message.sender !== agent ? " (" + message.sender + ")" : "";
        steps.push({
          kind: "model",
          label: "model" + (model ? " " + model : "") + who + ": " + what,
          start: from, end: to, first: ms(d.first_at), usage: d.usage || null,
        });
      }
      last = to;
    } else if (f.event === EV.RUN_REQUIRES_ACTION && d.run) {
      const since = d.run.required_action && d.run.required_action.since;
      waitFrom = ms(since) || last;
    } else if (ENDS.has(f.event) && d.run) {
      end = ms(d.run.finished_at);
    }
  }
  if (waitFrom != null) steps.push({ kind: "wait", label: "waiting for approval", start: waitFrom, end: null });
  return { steps, run, start, end, trace };
}

function div(cls, text) {
  const e = document.createElement("div");
  e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

// Draw ``frames`` (one run's events) into #timeline; ``traceUrl``: a link template or null.
export function drawTimeline(frames, modelOf, traceUrl) {
  const box = $("timeline");
  const { steps, run, start, end, trace } = stepsOf(frames, modelOf, null);
  box.replaceChildren();
  if (!run) {
    box.append(div("muted tl-empty", "No run yet: send a message, then its timeline shows here."));
    return;
  }
  const now = Date.now();
  const t0 = start ?? (steps.length ? steps[0].start : now);
  const t1 = end ?? Math.max(now, ...steps.map((s) => s.end ?? now));
  const span = Math.max(1, t1 - t0);
  const head = div("tl-head");
  const total = end != null ? duration(end - t0) : duration(now - t0) + " so far";
  const used = run.usage && run.usage.total_tokens > 0 && end != null ? " · " + tokens(run.usage) : "";
  head.append(div("tl-title", run.status + " · " + total + used));
  const ids = div("tl-ids mono");
  ids.append(document.createTextNode(run.id));
  if (trace) {
    const link = document.createElement(traceUrl ? "a" : "span");
    link.className = "tl-trace";
    link.textContent = "trace " + trace;
    if (traceUrl) {
      link.href = traceUrl.replace("{trace_id}", encodeURIComponent(trace));
      link.target = "_blank";
      link.rel = "noopener";
    }
    ids.append(document.createTextNode(" · "), link);
  }
  head.append(ids);
  const list = div("tl-steps");
  list.setAttribute("role", "list");
  for (const step of steps) {
    const row = div("tl-row tl-" + step.kind + (step.failed ? " tl-failed" : ""));
    row.setAttribute("role", "listitem");
    const took = step.end != null ? step.end - step.start : null;
    const details = [];
    if (step.kind === "model" && step.first && step.end != null && step.end - step.first > 5) {
      details.push("first token " + duration(step.first - step.start));
    }
    if (step.usage) details.push(tokens(step.usage));
    const figures = [duration(took), ...details];
    const label = div("tl-label", step.label);
    label.title = step.label;
    const figs = div("tl-figs", duration(took));
    const track = div("tl-track");
    const bar = div("tl-bar");
    const left = ((step.start - t0) / span) * 100;
    const width = (((step.end ?? t1) - step.start) / span) * 100;
    bar.style.left = Math.max(0, Math.min(99.5, left)) + "%";
    bar.style.width = Math.max(0.5, Math.min(100 - left, width)) + "%";
    if (step.end == null) bar.classList.add("tl-open");
    if (step.kind === "model" && step.first && took) {
      const wait = div("tl-ttft");  // before the first token
      wait.style.width = Math.min(100, ((step.first - step.start) / Math.max(1, took)) * 100) + "%";
      bar.append(wait);
    }
    track.append(bar);
    row.append(label, figs, track);
    if (details.length) row.append(div("tl-details", details.join(" · ")));
    row.setAttribute("aria-label", step.label + ": " + figures.join(", "));
    list.append(row);
  }
  if (!steps.length) list.append(div("muted", "No steps yet."));
  box.append(head, list);
}

// A run's stored events but deltas, read to the end of its stream (a run that has stopped:
// replayed, then the stream closes; past a pause the log goes on when the run was resumed,
// and the server ends the stream there while it still waits).
export async function loadFrames(runId) {
  const resp = await fetch("/v1/runs/" + encodeURIComponent(runId) + "/events", {
    headers: authHeaders(),
  });
  if (!resp.ok) throw await apiError(resp);
  const frames = [];
  const holder = { reader: null };
  for await (const frame of sseFrames(resp, holder)) {
    if (frame.event !== EV.MESSAGE_DELTA) frames.push(frame);
    if (ENDS.has(frame.event) && frame.event !== EV.RUN_REQUIRES_ACTION) break;
  }
  return frames;
}
