// An agent's versions (GET /v1/agents/{name}/versions, newest first): each one shown in the
// editor on demand, and rolled back to (POST /v1/agents/{name}/rollback: its spec becomes
// the current one as a new version; the history is kept).
import { api } from "./api.js";
import { $, ui } from "./common.js";

// Set by app.js: show a version's spec in the editor; after a rollback (the saved agent).
export const versionHooks = { show: (_agent, _version) => {}, rolledBack: async (_agent) => {} };

const path = (name) => "/v1/agents/" + encodeURIComponent(name);

function button(label, cls, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = cls;
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

// List the versions of ``name`` (hidden for a new agent).
export async function loadVersions(name) {
  const box = $("versions");
  const list = $("version-list");
  if (!name) { box.hidden = true; list.replaceChildren(); return; }
  const page = await api("GET", path(name) + "/versions?limit=20");
  if (ui.editing !== name) return;  // another agent was picked meanwhile
  const agent = ui.agents.find((a) => a.name === name);
  list.replaceChildren(...page.data.map((v) => {
    const li = document.createElement("li");
    li.className = "version" + (v.current ? " current" : "");
    li.dataset.version = v.version;
    const what = document.createElement("span");
    what.className = "version-what";
    what.textContent = "v" + v.version + (v.current ? " (current)" : "") + " · "
      + (v.spec.kind || "agent") + " · " + (v.spec.model || "—");
    what.title = new Date(v.created_at).toLocaleString();
    li.append(what, button("Show", "version-show", () => versionHooks.show(agent, v)));
    if (!v.current) {
      li.append(button("Roll back", "version-rollback", () => rollback(name, v.version)));
    }
    return li;
  }));
  $("versions-more").hidden = !page.has_more;
  box.hidden = false;
}

async function rollback(name, version) {
  const msg = $("agent-msg");
  try {
    const saved = await api("POST", path(name) + "/rollback", { version });
    await versionHooks.rolledBack(saved);
    msg.textContent = "rolled back: version " + version + "'s spec is now version " + saved.version;
    msg.className = "msg ok";
  } catch (err) {
    msg.textContent = "rollback failed: " + err.message;
    msg.className = "msg bad";
  }
}
