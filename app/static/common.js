// Shared by the playground's modules: the server's vocabulary, the page state, $.
export const V = window.AGENTSTATION; // event types, statuses, kinds, tools (/playground/vocab.js)
export const EV = V.events;
export const ENDS = new Set(V.endsStream);
export const ACTIVE = new Set(V.active);
export const $ = (id) => document.getElementById(id);

export const ui = {
  agents: [],          // GET /v1/agents
  sessions: [],        // the selected agent's sessions (GET /v1/sessions?agent=)
  models: [],          // raw model names (GET /v1/models, kind "model")
  agent: null,         // the selected agent's name
  session: null,       // the selected session's id
  editing: null,       // the agent being edited (null: a new one)
  run: null,           // the followed run: {id, lastEventId, status, bubbles, reader, detached}
  sessionsEpoch: 0,    // bumped by every list load and local change: a slower, older load is dropped
};

// What a complete message is: the user's, a tool call, a tool result, or the agent's text.
export function classify(message) {
  const f = message.formatted;
  if (message.sender === "user") return "user";
  if (f && typeof f === "object" && f.action && f.action.name) return "tool-call";
  if (f && typeof f === "object" && ("result" in f || "errmsg" in f) && "type" in f) {
    return "tool-result";
  }
  return "assistant";
}
