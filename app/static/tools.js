// The tool agent's tools in the editor's form: the tools a user adds (the registry's, less the
// agent loop's own actions, which the server leaves out of the vocabulary), MCP servers (the
// `mcp` tool, one per server: a URL or a command) and `approval` (which calls wait for a person).
// Config the form does not show (a tool's config, an MCP server's headers or allow list) is kept.
import { $, V } from "./common.js";

let loaded = [];  // the spec's tools as loaded: their config is kept

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props || {});
  e.append(...children);
  return e;
}

function checkbox(cls, value, checked, label) {
  const input = el("input", { type: "checkbox", className: cls, value, checked });
  return [input, el("label", {}, input, label)];
}

// Fill the tools, MCP servers and approval fields from a spec.
export function showTools(spec) {
  loaded = spec.tools || [];
  const approval = spec.approval || null;
  const asked = new Set(
    approval && Array.isArray(approval.tools) ? approval.tools : [],
  );
  for (const ref of loaded) if (ref.requires_approval) asked.add(ref.name);
  const names = loaded.map((t) => t.name);
  const box = $("f-tools");
  const rows = V.tools.map((name) => {
    const [use, useLabel] = checkbox("tool-use", name, names.includes(name), name);
    const [ask, askLabel] = checkbox("tool-ask", name, asked.has(name), "ask first");
    askLabel.className = "ask";
    ask.setAttribute("aria-label", "ask before each call of " + name);
    return el("div", { className: "tool-row" }, useLabel, askLabel);
  });
  box.replaceChildren(el("legend", {}, "Tools"), ...rows);
  const servers = $("f-mcp-list");
  servers.replaceChildren();
  for (const ref of loaded.filter((t) => t.name === "mcp")) addServer(ref.config || {});
  $("f-approval-all").checked = Boolean(approval && approval.tools === "all");
  $("f-approval-timeout").value = approval && approval.timeout_s ? approval.timeout_s : "";
  $("f-approval-on-timeout").value = (approval && approval.on_timeout) || "deny";
  $("f-approval-all").dispatchEvent(new Event("change"));
}

// One MCP server's row: where (a URL, or a command run in the session's sandbox) and a name.
export function addServer(config) {
  const where = config.url || (config.command || []).join(" ");
  const input = el("input", {
    className: "mcp-where", value: where, placeholder: "https://host/mcp or a command",
  });
  input.setAttribute("aria-label", "MCP server: URL or command");
  const name = el("input", { className: "mcp-name", value: config.name || "", placeholder: "name" });
  name.setAttribute("aria-label", "MCP server name (its tools are name.tool)");
  const row = el("div", { className: "mcp-row" }, input, name);
  row.config = config;
  const remove = el("button", { type: "button", className: "mcp-remove icon", textContent: "✕" });
  remove.setAttribute("aria-label", "Remove this MCP server");
  remove.addEventListener("click", () => row.remove());
  row.append(remove);
  $("f-mcp-list").append(row);
  return input;
}

// {tools, approval} for the spec (approval null: no call waits).
export function toolsSpec() {
  const tools = [];
  for (const use of $("f-tools").querySelectorAll("input.tool-use:checked")) {
    const old = loaded.find((t) => t.name === use.value);
    const ref = old ? { ...old } : { name: use.value };
    delete ref.requires_approval;  // the form says it in approval.tools
    tools.push(ref);
  }
  for (const row of $("f-mcp-list").querySelectorAll(".mcp-row")) {
    const where = row.querySelector(".mcp-where").value.trim();
    if (!where) continue;
    const config = { ...row.config };
    delete config.url;
    delete config.command;
    if (/^https?:\/\//.test(where)) config.url = where;
    else config.command = where.split(/\s+/);
    const name = row.querySelector(".mcp-name").value.trim();
    if (name) config.name = name; else delete config.name;
    tools.push({ name: "mcp", config });
  }
  let approval = null;
  const picked = [...$("f-tools").querySelectorAll("input.tool-ask:checked")]
    .map((i) => i.value).filter((n) => tools.some((t) => t.name === n));
  if ($("f-approval-all").checked) approval = { tools: "all" };
  else if (picked.length) approval = { tools: picked };
  if (approval) {
    const timeout = $("f-approval-timeout").value;
    if (timeout !== "") {
      approval.timeout_s = Number(timeout);
      approval.on_timeout = $("f-approval-on-timeout").value;
    }
  }
  return { tools, approval };
}

export function wireTools() {
  $("f-mcp-add").addEventListener("click", () => addServer({}).focus());
  $("f-approval-all").addEventListener("change", () => {
    const all = $("f-approval-all").checked;
    for (const ask of $("f-tools").querySelectorAll("input.tool-ask")) ask.disabled = all;
  });
}
