// HTTP and server-sent events for the playground: the key from localStorage, the error
// envelope, and SSE frames read from a fetch response (EventSource cannot send the header).
export const store = {
  get: (k) => localStorage.getItem("agentstation." + k),
  set: (k, v) => (v == null ? localStorage.removeItem("agentstation." + k)
                            : localStorage.setItem("agentstation." + k, v)),
};


export class ApiError extends Error {
  constructor(status, message, code) { super(message); this.status = status; this.code = code; }
}

export function authHeaders() {
  const key = store.get("key");
  return key ? { Authorization: "Bearer " + key } : {};
}

export async function api(method, path, body, extra) {
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

export async function apiError(resp) {
  let message = resp.status + " " + resp.statusText;
  let code = null;
  try {
    const err = (await resp.json()).error;
    if (err) { message = err.message; code = err.code; }
  } catch (_) { /* not JSON */ }
  return new ApiError(resp.status, message, code);
}

// Server-sent events from a fetch response: {id, event, data} per frame; comments skipped.
export async function* sseFrames(resp, run) {
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

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
