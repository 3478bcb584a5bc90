// "View code": the curl and Python (`openai`) lines for what is on the screen — the selected
// agent, its session, the last message, the run and a waiting approval — against this server.
import { store } from "./api.js";
import { $, ui } from "./common.js";

const q = (value) => "'" + String(value).replace(/'/g, "'\\''") + "'";  // a shell word
const py = (value) => JSON.stringify(value);  // a Python str literal (JSON's escapes are Python's)

// The blocks for the page's state: [{title, lang, text}].
export function codeBlocks(state) {
  const base = state.origin;
  const keyed = Boolean(state.key);
  const auth = keyed ? ' -H "$H"' : "";
  const blocks = [];
  blocks.push({
    title: "Shell set-up",
    lang: "bash",
    text: keyed
      ? "export KEY=…   # your API key (the one typed above)\nH=\"Authorization: Bearer $KEY\""
      : "# no key: this loopback server accepts anonymous requests",
  });
  const agent = state.agent;
  if (agent) {
    const body = { name: agent.name, spec: agent.spec };
    if (agent.description) body.description = agent.description;
    blocks.push({
      title: "Create this agent (PUT /v1/agents/" + agent.name + " saves a new version)",
      lang: "bash",
      text: "curl -s " + base + "/v1/agents" + auth + " --json " + q(JSON.stringify(body)),
    });
  }
  const message = state.message || "Hello";
  if (agent && !state.session) {
    blocks.push({
      title: "Start a session",
      lang: "bash",
      text: "curl -s " + base + "/v1/sessions" + auth + " --json " + q(JSON.stringify({ agent: agent.name })),
    });
  }
  if (state.session) {
    const sid = encodeURIComponent(state.session);
    blocks.push({
      title: "Send a message to this session (streamed run events)",
      lang: "bash",
      text: "curl -sN " + base + "/v1/sessions/" + sid + "/messages" + auth + " --json "
        + q(JSON.stringify({ message, stream: true })),
    });
    blocks.push({
      title: "This session's memory",
      lang: "bash",
      text: "curl -s " + base + "/v1/sessions/" + sid + "/memory" + auth,
    });
  }
  if (state.run) {
    const rid = encodeURIComponent(state.run.id);
    blocks.push({
      title: "This run's events (replayed, then followed)",
      lang: "bash",
      text: "curl -sN " + base + "/v1/runs/" + rid + "/events" + auth,
    });
    if (state.run.calls && state.run.calls.length) {
      const decisions = state.run.calls.map((c) => ({ id: c.id, action: "approve" }));
      blocks.push({
        title: "Approve the waiting tool call" + (decisions.length > 1 ? "s" : ""),
        lang: "bash",
        text: "curl -s " + base + "/v1/runs/" + rid + "/resume" + auth + " --json "
          + q(JSON.stringify({ decisions })),
      });
    }
  }
  if (agent) {
    const lines = [
      "import os",
      "from openai import OpenAI",
      "",
      keyed
        ? "client = OpenAI(base_url=" + py(base + "/v1") + ", api_key=os.environ[\"KEY\"])"
        : "client = OpenAI(base_url=" + py(base + "/v1") + ", api_key=\"anonymous\",\n"
          + "                default_headers={\"Authorization\": \"\"})  # no key on loopback",
      "reply = client.chat.completions.create(",
      "    model=" + py(agent.name) + ",",
      "    messages=[{\"role\": \"user\", \"content\": " + py(message) + "}],",
    ];
    if (state.session) {
      lines.push("    extra_headers={\"X-Session-Id\": " + py(state.session) + "},  # this session's memory");
    }
    lines.push(")", "print(reply.choices[0].message.content, reply.usage)");
    blocks.push({ title: "Python (openai)", lang: "python", text: lines.join("\n") });
  }
  return blocks;
}

// The page's state as codeBlocks takes it.
export function pageState() {
  const agent = ui.agents.find((a) => a.name === ui.agent) || null;
  const users = [...document.querySelectorAll("#transcript .msg-item.user .body")];
  const followed = ui.run && ui.run.id ? ui.run : null;
  const id = followed ? followed.id : ui.shownRun;
  const run = id ? { id, calls: (followed && followed.calls) || [] } : null;
  return {
    origin: window.location.origin,
    key: store.get("key"),
    agent,
    session: ui.session,
    message: users.length ? users[users.length - 1].textContent : null,
    run,
  };
}

export function showCode() {
  const view = $("code-view");
  view.replaceChildren(...codeBlocks(pageState()).map((block) => {
    const box = document.createElement("section");
    box.className = "code-block";
    const h = document.createElement("h3");
    h.textContent = block.title;
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy";
    copy.textContent = "Copy";
    const pre = document.createElement("pre");
    pre.className = "mono lang-" + block.lang;
    pre.textContent = block.text;
    copy.addEventListener("click", () => {
      navigator.clipboard.writeText(block.text).then(
        () => { copy.textContent = "Copied"; },
        () => { copy.textContent = "Select and copy"; },
      );
    });
    h.append(copy);
    box.append(h, pre);
    return box;
  }));
}
