// The Timeline tab: which run it shows (a picker of the session's runs) and when it redraws
// (each event of the followed run; every second while a run goes on or waits).
import { api } from "./api.js";
import { $, ACTIVE, EV, V, ui } from "./common.js";
import { drawTimeline, loadFrames } from "./timeline.js";

const WAITING = V.statuses.REQUIRES_ACTION;

const modelOf = (sender) => {
  const agent = ui.agents.find((a) => a.name === sender);
  return agent ? agent.spec.model : null;
};
const frameCache = new Map();  // finished runs' events (they never change)

// The session's runs in the timeline's picker, the newest (or the one followed) selected.
export async function loadRunChoices() {
  const select = $("timeline-run");
  if (!ui.session) { select.replaceChildren(); drawTimeline([], modelOf, V.traceUrl); return; }
  const runs = await api("GET", "/v1/sessions/" + encodeURIComponent(ui.session) + "/runs?limit=20");
  const current = ui.timelineRun || (ui.run && ui.run.id) || (runs.data[0] && runs.data[0].id);
  select.replaceChildren(...runs.data.map((r) => {
    const o = document.createElement("option");
    o.value = r.id;
    const said = r.input && typeof r.input.content === "string" ? r.input.content : r.id;
    o.textContent = new Date(r.created_at).toLocaleTimeString() + " · " + r.status + " · " + said.slice(0, 40);
    return o;
  }));
  if (current) select.value = current;
  ui.timelineRun = select.value || null;
  await refreshTimeline();
}

// Redraw the timeline (when it shows): the followed run's own events, or a stopped run's.
export async function refreshTimeline() {
  if ($("pane-timeline").hidden) return;
  const id = ui.timelineRun || (ui.run && ui.run.id);
  if (!id) { drawTimeline([], modelOf, V.traceUrl); return; }
  const run = ui.run;
  if (run && run.id === id && run.frames.length && run.frames[0].event === EV.RUN_CREATED) {
    drawTimeline(run.frames, modelOf, V.traceUrl);
    return;
  }
  if (run && run.id === id && ACTIVE.has(run.status)) return;  // its events come with the stream
  let frames = frameCache.get(id);
  if (!frames) {
    frames = await loadFrames(id);
    const last = frames[frames.length - 1];
    if (last && last.event !== EV.RUN_REQUIRES_ACTION) frameCache.set(id, frames);
  }
  if ((ui.timelineRun || (ui.run && ui.run.id)) === id) drawTimeline(frames, modelOf, V.traceUrl);
}

// A running or waiting run's open bar grows with the clock.
setInterval(() => {
  const run = ui.run;
  if (run && (ACTIVE.has(run.status) || run.status === WAITING)) refreshTimeline().catch(() => {});
}, 1000);
