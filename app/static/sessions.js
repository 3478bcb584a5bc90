// The sessions list: each session named by its title (metadata.title: its first message, or
// what the user renamed it to; the id on hover), renamed in place and deleted after a confirm.
import { api } from "./api.js";
import { $, ui } from "./common.js";

const TITLE_MAX = 60;

export const titleOf = (s) => (s.metadata && typeof s.metadata.title === "string" && s.metadata.title) || s.id;

// A title from a first message: its first line, cut to TITLE_MAX characters.
export function titleFrom(message) {
  const line = message.trim().split("\n")[0].trim();
  return line.length > TITLE_MAX ? line.slice(0, TITLE_MAX - 1) + "…" : line;
}

const path = (id) => "/v1/sessions/" + encodeURIComponent(id);

// PATCH the session's title (merged into its metadata); the list shows it at once.
export async function setTitle(id, title) {
  ui.sessionsEpoch++; // a list load already on its way would bring the old title back
  const saved = await api("PATCH", path(id), { metadata: { title } });
  const i = ui.sessions.findIndex((s) => s.id === id);
  if (i >= 0) ui.sessions[i] = saved;
  return saved;
}

function button(label, cls, aria, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = cls;
  b.textContent = label;
  if (aria) b.setAttribute("aria-label", aria);
  b.addEventListener("click", onClick);
  return b;
}

// ``on``: {select(id), deleted(id), error(message)}.
export function renderSessions(on) {
  const list = $("session-list");
  list.replaceChildren(...ui.sessions.map((s) => sessionItem(s, on)));
}

function sessionItem(s, on) {
  const li = document.createElement("li");
  li.className = "session";
  li.dataset.id = s.id;
  const title = titleOf(s);
  const open = button(title, "session-open", null, () => on.select(s.id));
  open.title = s.id;  // the id on hover
  const small = document.createElement("small");
  small.textContent = new Date(s.created_at).toLocaleString();
  open.appendChild(small);
  open.setAttribute("aria-current", s.id === ui.session ? "true" : "false");
  const rename = button("✎", "session-rename icon", "Rename " + title, () => startRename(li, s, on));
  rename.title = "Rename";
  const remove = button("✕", "session-delete icon", "Delete " + title, () => confirmDelete(li, s, on));
  remove.title = "Delete";
  li.append(open, rename, remove);
  return li;
}

function startRename(li, s, on) {
  const input = document.createElement("input");
  input.className = "session-title";
  input.value = titleOf(s) === s.id ? "" : titleOf(s);
  input.placeholder = "title (Enter saves, Esc keeps)";
  input.setAttribute("aria-label", "New title of " + s.id);
  input.maxLength = 200;
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    try {
      if (save && input.value.trim()) await setTitle(s.id, input.value.trim());
    } catch (err) {
      on.error("rename failed: " + err.message);
    }
    renderSessions(on);
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); finish(true); }
    else if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); finish(false); }
  });
  input.addEventListener("blur", () => finish(true));
  li.replaceChildren(input);
  input.focus();
  input.select();
}

function confirmDelete(li, s, on) {
  const ask = document.createElement("span");
  ask.className = "session-ask";
  ask.textContent = "Delete “" + titleOf(s) + "”, its memory and runs?";
  const yes = button("Delete", "session-confirm danger", null, async () => {
    try {
      ui.sessionsEpoch++; // a list load already on its way would bring the session back
      await api("DELETE", path(s.id));
      ui.sessions = ui.sessions.filter((x) => x.id !== s.id);
      on.deleted(s.id);
    } catch (err) {
      on.error("delete failed: " + err.message);
    }
    renderSessions(on);
  });
  const no = button("Keep", "session-keep", null, () => renderSessions(on));
  li.replaceChildren(ask, yes, no);
  yes.focus();
}
