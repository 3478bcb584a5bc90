// The agent editor: the spec as a form or as JSON; fields the form lacks are kept.
import { api } from "./api.js";
import { $, V, ui } from "./common.js";
import { showTools, toolsSpec } from "./tools.js";
import { loadVersions } from "./versions.js";

// Set by app.js: what happens after a save, and how to show the editor's tab.
export const hooks = { afterSave: async (_agent) => {}, showTab: (_name) => {} };

const FORM_KEYS = ["kind", "model", "system_prompt", "gen_params", "tools", "max_turn", "approval"];

export function fillSelect(select, values, current) {
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

export function fillModelSelect() {
  fillSelect($("f-model"), ui.models, $("f-model").value || ui.models[0]);
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
  const tools = usesTools();
  if (tools) {
    const { tools: refs, approval } = toolsSpec();
    if (refs.length) spec.tools = refs;
    if (approval) spec.approval = approval;
  }
  const maxTurn = numberOrNull("f-max-turn");
  if (maxTurn !== null && tools) spec.max_turn = maxTurn;
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
  showTools(spec);
  syncKind();
}

// Tools and turns belong to kinds that call tools: hidden (and not sent) for the others.
const usesTools = () => $("f-kind").value === "tool_agent";

export function syncKind() {
  $("tool-fields").hidden = !usesTools();
}

export function editAgent(agent) {
  ui.editing = agent.name;
  fillForm(agent);
  if (jsonMode()) $("f-json").value = JSON.stringify(formAgent(), null, 2);
  $("agent-save").textContent = "Save version " + (agent.version + 1);
  $("agent-msg").textContent = "";
  loadVersions(agent.name).catch(() => {});
}

// An older version's spec in the editor: Save makes it the next version (as a rollback does).
export function showVersion(agent, version) {
  editAgent({ ...agent, spec: version.spec });
  $("agent-msg").textContent = "version " + version.version + " in the editor"
    + (version.current ? "" : ": Save makes it version " + (agent.version + 1));
  $("agent-msg").className = "msg";
}

export function newAgent() {
  ui.editing = null;
  loadVersions(null);
  fillForm({ name: "", spec: { kind: "agent", model: ui.models[0] } });
  if (jsonMode()) $("f-json").value = JSON.stringify(formAgent(), null, 2);
  $("agent-save").textContent = "Create agent";
  $("agent-msg").textContent = "";
  hooks.showTab("agent");
}

const jsonMode = () => !$("json-fields").hidden;

export function setView(json) {
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
  // The hidden form's checks (a required name) must not block a submit of the JSON view:
  // the JSON is checked here and by the API, whose message shows below the button.
  $("agent-form").noValidate = json;
  $("view-form").setAttribute("aria-pressed", String(!json));
  $("view-json").setAttribute("aria-pressed", String(json));
}

export async function saveAgent(event) {
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
  if (!agent || typeof agent !== "object" || Array.isArray(agent)) {
    msg.textContent = "the JSON must be an object: {\"name\": …, \"spec\": {…}}";
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
    await hooks.afterSave(saved);
    msg.textContent = "saved " + saved.name + " v" + saved.version;
    msg.className = "msg ok";
  } catch (err) {
    msg.textContent = err.message;
    msg.className = "msg bad";
  }
}

