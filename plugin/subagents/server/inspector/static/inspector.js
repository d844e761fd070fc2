"use strict";
// The inspector page: chat over the SSE stream (with agent step records), then the tracker.
// Everything is built with textContent: nothing from the server is parsed as HTML.
(() => {
  const params = new URLSearchParams(location.search);
  const token = params.get("token");
  if (token) history.replaceState(null, "", location.pathname);  // keep it out of the URL bar
  const auth = token ? { Authorization: "Bearer " + token } : {};
  const $ = (id) => document.getElementById(id);
  const STATES = { waiting_for_input: "waiting for the user", interrupted: "interrupted",
    resuming: "resumed", input_required: "waiting for the user", completed: "completed",
    cancelled: "cancelled", fatal_error: "failed", recoverable_error: "failed",
    running: "running", resumed: "resumed", started: "running" };
  // slots every project has; the page fills them in when it serves this script
  const INTERNAL_SLOTS = new Set(/*INSPECTOR_INTERNAL_SLOTS*/[]);
  let sender = "";
  let seq = 0;
  let slotsBefore = {};
  let changedThisTurn = new Set();
  let liveAgents = new Map();
  let runBox = null;
  let replay = null;  // the test case being replayed, if any
  let replayAt = 0;
  const steps = new Map();
  const bubbles = new Map();

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value; else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) {
        node.append(typeof child === "string" ? document.createTextNode(child) : child);
      }
    }
    return node;
  }
  const json = (value) => JSON.stringify(value, null, 2);
  const stamp = (node) => { node.dataset.seq = String(++seq); return node; };
  const scrollEnd = (box) => { box.scrollTop = box.scrollHeight; };

  function newConversation() {
    sender = "inspect-" + Math.random().toString(36).slice(2, 10);
    $("sender").textContent = sender;
    for (const id of ["chat", "timeline", "stack", "agents"]) $(id).replaceChildren();
    $("slots").tBodies[0].replaceChildren();
    $("events").textContent = "[]";
    slotsBefore = {}; changedThisTurn = new Set(); liveAgents = new Map();
    steps.clear(); bubbles.clear(); runBox = null;
    $("save").hidden = true;
    refreshTracker();
    return refreshRecording();
  }

  // ------------------------------------------------------------------ chat
  function addMessage(kind, text) {
    const node = stamp(el("div", { class: "msg " + kind }, el("span", { class: "text" }, text)));
    $("chat").append(node); scrollEnd($("chat"));
    return node;
  }

  function addButtons(node, buttons) {
    const row = el("div", { class: "buttons" });
    for (const button of buttons) {
      const title = String(button.title ?? button.payload ?? "");
      const payload = String(button.payload ?? title);
      const b = el("button", { type: "button" }, title);
      b.addEventListener("click", () => send(title, payload));
      row.append(b);
    }
    node.append(row);
  }

  // ------------------------------------------------------------------ timeline
  function agentRun(name) {
    if (!runBox || runBox.dataset.agent !== name || runBox.dataset.ended === "true") {
      runBox = el("section", { class: "run", "data-agent": name },
        el("h3", {}, "Agent " + name));
      $("timeline").append(stamp(runBox));
    }
    return runBox;
  }

  function stepBox(data) {
    const key = data.agent + "#" + data.step;
    let box = steps.get(key);
    if (!box) {
      const title = data.step === 0 ? "Resumed: approved calls" : "Step " + data.step;
      box = stamp(el("div", { class: "step", "data-step": String(data.step) },
        el("h4", {}, title)));
      agentRun(data.agent).append(box);
      steps.set(key, box);
    }
    return box;
  }

  function details(summary, value) {
    return el("details", {}, el("summary", {}, summary), el("pre", {}, json(value)));
  }

  const handlers = {
    command_generation(data) {
      runBox = null;
      const commands = (data.commands || []).join(", ") || "no command";
      $("timeline").append(stamp(el("section", { class: "run commands",
        "data-kind": "command_generation" },
        el("h3", {}, "Command generator"),
        el("p", { class: "facts" }, `model call ${data.duration_ms} ms → ${commands}`))));
      scrollEnd($("timeline"));
    },
    agent_run_start(data) {
      runBox = null;
      steps.clear();  // step numbers start again with every run
      const box = agentRun(data.agent);
      box.append(el("p", { class: "facts" }, "tools: " + ((data.tools || []).join(", ") || "none")));
      setAgent(data.agent, "running");
    },
    agent_step(data) {
      const box = stepBox(data);
      const tokens = `${data.prompt_tokens} in / ${data.completion_tokens} out tokens`;
      box.append(el("p", { class: "facts model-call" },
        `model call ${data.duration_ms} ms · ${tokens} · offered: ` +
        ((data.offered_tools || []).join(", ") || "none")));
      if (data.text) {
        box.append(el("p", { class: "text-out" }, el("span", { class: "kind" }, "text"),
          data.text));
      }
      for (const call of data.tool_calls || []) {
        box.append(el("p", { class: "facts" }, `asks for ${call.name} ${JSON.stringify(call.arguments)}`));
      }
      const raw = data.raw || {};
      box.append(details("raw request", raw.request), details("raw response", raw.response));
      scrollEnd($("timeline"));
    },
    agent_text(data) {
      const box = stepBox(data);
      const match = [...box.querySelectorAll(".text-out")].find(
        (p) => p.lastChild && p.lastChild.textContent === data.text);
      if (match) {
        match.querySelector(".kind").textContent = data.kind;
        match.dataset.kind = data.kind;
      } else {
        box.append(el("p", { class: "text-out", "data-kind": data.kind },
          el("span", { class: "kind" }, data.kind), String(data.text ?? "")));
      }
    },
    agent_tool_call(data) {
      const where = data.server ? ` on ${data.server}` : ` (${data.source || "tool"})`;
      const node = stamp(el("div", { class: "call" + (data.is_error ? " error" : ""),
        "data-tool": data.tool },
        el("p", { class: "mono" }, `${data.tool}${where} · ${data.duration_ms} ms · ` +
          (data.parallel ? "parallel" : "alone")),
        el("pre", { class: "arguments" }, "arguments: " + json(data.arguments)),
        data.is_error ? el("pre", { class: "error-text" }, "error: " + data.error)
                      : el("pre", { class: "result" }, "result: " + String(data.result ?? ""))));
      stepBox(data).append(node);
      scrollEnd($("timeline"));
    },
    agent_wait(data) {
      const what = data.waiting_for === "approval" ? "the user's approval" : "the client to run it";
      stepBox(data).append(stamp(el("div", { class: "wait" },
        `${data.tool} ${JSON.stringify(data.arguments)}: waiting for ${what}`)));
    },
    agent_run_end(data) {
      const box = agentRun(data.agent);
      box.append(stamp(el("p", { class: "exit" },
        `exit: ${data.status} · reason ${data.exit_reason} · ${data.steps} steps` +
        (data.error ? ` · ${data.error}` : ""))));
      box.dataset.ended = "true";
      setAgent(data.agent, data.status);
      scrollEnd($("timeline"));
    },
    message_start(data) {
      const node = addMessage("bot streaming", "");
      bubbles.set(data.id, node);
    },
    message_chunk(data) {
      const node = bubbles.get(data.id) || handlers.message_start(data) || bubbles.get(data.id);
      node.querySelector(".text").textContent += data.text;
      scrollEnd($("chat"));
    },
    message_end(data) {
      const node = bubbles.get(data.id);
      if (node) {
        node.classList.remove("streaming");
        if (data.interrupted) node.append(el("span", { class: "hint" }, " (interrupted)"));
      }
    },
    message(data) {
      const node = addMessage("bot", data.text || "");
      if (data.buttons && data.buttons.length) addButtons(node, data.buttons);
    },
    slot(data) {
      changedThisTurn.add(data.name);
      upsertSlot(data.name, data.value);
    },
    error(data) {
      addMessage("system", `error: ${data.error}` + (data.error_id ? ` (${data.error_id})` : ""));
    },
  };

  // ------------------------------------------------------------------ stack and slots
  function setAgent(name, state) {
    liveAgents.set(name, state);
    renderAgents();
  }

  function renderAgents() {
    const list = $("agents");
    list.replaceChildren();
    for (const [name, state] of liveAgents) {
      list.append(el("li", { "data-agent": name, "data-state": state }, name,
        el("span", { class: "state " + state }, STATES[state] || state)));
    }
  }

  function renderStack(stack) {
    const list = $("stack");
    list.replaceChildren();
    for (const frame of [...(stack || [])].reverse()) {
      if (frame.kind === "agent") {
        list.append(el("li", { "data-kind": "agent", "data-agent": frame.agent_id,
          "data-state": frame.state }, `agent ${frame.agent_id} (flow ${frame.flow_id})`,
          el("span", { class: "state " + frame.state }, STATES[frame.state] || frame.state)));
      } else {
        const state = frame.interrupted ? "interrupted" : frame.awaiting
          ? `collecting ${frame.awaiting}` : `at ${frame.step_id}`;
        list.append(el("li", { "data-kind": "flow", "data-flow": frame.flow_id },
          `flow ${frame.flow_id}`, el("span", { class: "state" }, state)));
      }
    }
    if (!list.children.length) list.append(el("li", { class: "hint" }, "empty"));
  }

  function agentStatesFromEvents(events) {
    const names = { agent_started: "running", agent_completed: "completed",
      agent_cancelled: "cancelled", agent_interrupted: "interrupted", agent_resumed: "resumed" };
    for (const event of events) {
      const state = names[event.event];
      if (state && event.agent_id) liveAgents.set(event.agent_id, state);
    }
  }

  // a slot name may wrap after an underscore, never inside a word
  function slotName(cell, text) {
    cell.replaceChildren();
    text.split("_").forEach((part, index, parts) => {
      cell.append(part + (index < parts.length - 1 ? "_" : ""));
      if (index < parts.length - 1) cell.append(el("wbr"));
    });
  }

  function upsertSlot(name, value) {
    const body = $("slots").tBodies[0];
    let row = [...body.rows].find((r) => r.dataset.slot === name);
    if (!row) {
      row = el("tr", { "data-slot": name, "data-internal": String(INTERNAL_SLOTS.has(name)) },
        el("th", { scope: "row" }), el("td"));
      body.append(row);
    }
    row.cells[1].textContent = JSON.stringify(value);
    const changed = changedThisTurn.has(name);
    row.classList.toggle("changed", changed);
    row.dataset.changed = String(changed);
    slotName(row.cells[0], changed ? `${name} (changed)` : name);
    noteSlots();
  }

  function noteSlots() {
    const rows = [...$("slots").tBodies[0].rows];
    const internal = rows.filter((r) => r.dataset.internal === "true").length;
    $("internal-count").textContent = String(internal);
    $("slots-note").hidden = rows.length === 0 || internal < rows.length;
  }
  $("show-internal").addEventListener("change", () => {
    $("slots").classList.toggle("show-internal", $("show-internal").checked);
  });

  async function refreshTracker(endOfTurn) {
    const response = await fetch(`/conversations/${encodeURIComponent(sender)}/tracker`,
      { headers: auth });
    if (!response.ok) { addMessage("system", `tracker: HTTP ${response.status}`); return; }
    const state = await response.json();
    const slots = state.slots || {};
    if (endOfTurn) {
      for (const [name, value] of Object.entries(slots)) {
        if (JSON.stringify(value) !== JSON.stringify(slotsBefore[name])) changedThisTurn.add(name);
      }
    }
    $("slots").tBodies[0].replaceChildren();
    for (const name of Object.keys(slots).sort()) upsertSlot(name, slots[name]);
    slotsBefore = slots;
    renderStack(state.stack);
    // the stack's agent frames override what the events say (an agent waiting for the user)
    agentStatesFromEvents(state.events || []);
    for (const frame of state.stack || []) {
      if (frame.kind === "agent") liveAgents.set(frame.agent_id, frame.state);
    }
    renderAgents();
    $("events").textContent = json(state.events || []);
  }

  // ------------------------------------------------------------------ one turn
  function handleFrame(raw) {
    let kind = "message";
    const lines = [];
    for (const line of raw.split("\n")) {
      if (line.startsWith("event:")) kind = line.slice(6).trim();
      else if (line.startsWith("data:")) lines.push(line.slice(5).trimStart());
    }
    if (!lines.length) return;
    let data;
    try { data = JSON.parse(lines.join("\n")); } catch { return; }
    const handler = Object.hasOwn(handlers, kind) ? handlers[kind] : null;
    try {
      if (handler) handler(data);
    } catch (exc) {  // one odd frame must not stop the rest of the turn
      addMessage("system", `could not show a ${kind} event: ${exc.message}`);
    }
  }

  async function send(text, payload, metadata) {
    const box = $("message");
    $("send").disabled = true;
    $("save-test").disabled = true;  // the turn is stored when it ends: save after it
    $("status").textContent = "The assistant is answering…";
    changedThisTurn = new Set();
    addMessage("user", text);
    try {
      const response = await fetch("/webhooks/stream/webhook?inspect=true", {
        method: "POST", headers: { ...auth, "Content-Type": "application/json" },
        body: JSON.stringify({ sender, message: payload ?? text, metadata: metadata || {} }) });
      if (!response.ok) {
        addMessage("system", `error: HTTP ${response.status}`);
      } else {
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            handleFrame(buffer.slice(0, end));
            buffer = buffer.slice(end + 2);
          }
        }
      }
      await refreshTracker(true);
    } catch (exc) {
      addMessage("system", "connection failed: " + exc.message);
    } finally {
      $("send").disabled = false;
      $("save-test").disabled = false;
      $("status").textContent = "";
      document.body.dataset.turns = String(Number(document.body.dataset.turns || 0) + 1);
      box.focus();
    }
  }

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const box = $("message");
    const text = box.value.trim();
    if (!text || $("send").disabled) return;
    box.value = "";
    send(text);
  });
  document.querySelector(".skip").addEventListener("click", (event) => {
    event.preventDefault();
    $("message").focus();
  });
  $("new-conversation").addEventListener("click", () => {
    newConversation();
    $("message").focus();
  });

  // ------------------------------------------------------------------ save as test
  // The conversation becomes a conversation test through GET /conversations/{sender}/test.
  // Only a conversation recorded from its first message can: the test replays the recorded
  // model replies and tool results, so it runs with neither the model nor the MCP servers.
  let downloadUrl = null;
  const conversationUrl = (what) => `/conversations/${encodeURIComponent(sender)}/${what}`;

  async function refreshRecording() {
    const asked = sender;
    let state = "unknown";  // only when the server cannot be asked
    try {
      const response = await fetch(conversationUrl("recording"), { headers: auth });
      if (response.ok) state = (await response.json()).recording ? "on" : "off";
    } catch { /* shown as unknown */ }
    if (asked !== sender) return;
    $("recording-state").textContent = state;
    $("recording-state").dataset.recording = state;
  }

  function showSave(outcome, message, options) {
    const opts = options || {};
    const panel = $("save");
    panel.dataset.outcome = outcome;
    panel.dataset.code = opts.code || "";
    $("save-message").textContent = message;
    $("save-command").textContent = opts.command || "";
    $("save-command").hidden = !opts.command;
    $("save-yaml").value = opts.yaml || "";
    for (const id of ["save-yaml", "save-yaml-label", "save-copy", "save-download"]) {
      $(id).hidden = opts.yaml === undefined;
    }
    $("save-record").hidden = !opts.record;
    $("save-record").textContent = opts.record === "new" ? "Start a recorded conversation"
      : "Record this conversation";
    $("save-record").dataset.mode = opts.record || "";
    panel.hidden = false;
    $("save-title").focus();
  }

  function offerTest(text) {
    const name = (/^\s*-?\s*test_case:\s*(\S+)/m.exec(text) || [])[1] || "recorded_conversation";
    const file = name + ".yml";
    if (downloadUrl) URL.revokeObjectURL(downloadUrl);
    downloadUrl = URL.createObjectURL(new Blob([text], { type: "application/yaml" }));
    $("save-download").href = downloadUrl;
    $("save-download").download = file;
    showSave("saved", `Downloaded ${file}. Put it in the project's tests/e2e/ folder and run ` +
      "the command below: the test replays the recorded model replies (llm_script) and tool " +
      "results (tool_script), so it needs neither the model nor the MCP servers. Edit a " +
      "recorded reply to see how the conversation would have gone.",
      { yaml: text, command: `subagents test tests/e2e/${file}` });
    $("save-download").click();
  }

  function explainRefusal(status, body) {
    const code = String(body.code || "");
    const recordingOn = $("recording-state").dataset.recording === "on";
    if (code === "export.not_recorded") {
      showSave("refused", "This conversation cannot be saved as a test: not all of its turns " +
        "were recorded. A test that runs without the model needs the model's replies and the " +
        "tool results of every turn (its llm_script and tool_script), and only a recorded turn " +
        "keeps them; recording a conversation that has already started does not bring its " +
        "earlier turns back. Start a new conversation with recording on, have it again, then " +
        "save it.", { code, record: replay ? undefined : "new" });
    } else if (code === "export.no_conversation") {
      showSave("empty", "Nothing to save yet: this conversation has no messages. " + (recordingOn
        ? "Recording is on, so every turn keeps what the test needs: send your messages, then " +
          "save it."
        : "Recording is off: turn it on before the first message, or the conversation cannot " +
          "become a test."), { code, record: recordingOn || replay ? undefined : "this" });
    } else {
      showSave("failed", `The server could not export this conversation (HTTP ${status}` +
        (code ? `, ${code}` : "") + ")" + (body.error ? ": " + body.error : "."), { code });
    }
  }

  async function saveAsTest() {
    let response;
    try {
      response = await fetch(conversationUrl("test"), { headers: auth });
    } catch (exc) {
      showSave("failed", "Could not reach the server: " + exc.message);
      return;
    }
    if (response.ok) {
      offerTest(await response.text());
      return;
    }
    let body = {};
    try { body = await response.json(); } catch { /* not JSON: the status says enough */ }
    explainRefusal(response.status, body || {});
  }

  $("save-test").addEventListener("click", saveAsTest);
  $("save-close").addEventListener("click", () => {
    $("save").hidden = true;
    $("save-test").focus();
  });
  $("save-record").addEventListener("click", async () => {
    if ($("save-record").dataset.mode === "new") await newConversation();
    let ok = false;
    try {
      ok = (await fetch(conversationUrl("recording"), { method: "PUT", headers: auth })).ok;
    } catch { /* reported below */ }
    await refreshRecording();
    if (!ok) {
      showSave("failed", "Recording could not be turned on for this conversation.");
      return;
    }
    showSave("recording", `Recording is on for conversation ${sender}: every turn keeps the ` +
      "model's replies and the tool results. Send your messages, then choose Save as test.");
    $("message").focus();
  });
  $("save-copy").addEventListener("click", async () => {
    const box = $("save-yaml");
    try {
      await navigator.clipboard.writeText(box.value);
      $("status").textContent = "The test was copied.";
    } catch {
      box.focus();
      box.select();
      $("status").textContent = "The test is selected: copy it with Ctrl+C.";
    }
  });

  // ------------------------------------------------------------------ replay of a test case

  function showReplayStep() {
    const steps = replay.steps;
    $("replay-progress").textContent = `message ${Math.min(replayAt + 1, steps.length)} of ${steps.length}`;
    if (replayAt >= steps.length) {
      $("replay-next").textContent = "Every test message was sent. Save as test keeps " +
        "this run as a new test.";
      $("replay-send").disabled = true;
      $("replay-expect").textContent = "";
      return;
    }
    $("replay-next").textContent = `Next: "${steps[replayAt].user}"`;
    const expect = steps[replayAt].expect;
    $("replay-expect").textContent = expect.length
      ? "Then the test expects: " + expect.join(" / ") : "";
  }

  $("replay-send").addEventListener("click", async () => {
    if (!replay || replayAt >= replay.steps.length || $("send").disabled) return;
    const step = replay.steps[replayAt++];
    // what the test expects after this message stays beside the chat until the next one
    $("replay-sent").textContent = `After "${step.user}" the test expects: ` +
      (step.expect.length ? step.expect.join(" / ") : "no bot message");
    $("replay-send").disabled = true;
    await send(step.user, undefined, step.metadata);
    $("replay-send").disabled = false;
    showReplayStep();
    $("replay-send").focus();
  });

  async function start() {
    try {
      const response = await fetch("/inspect/replay", { headers: auth });
      const plan = response.ok ? await response.json() : { case: null };
      if (plan.case) {
        replay = plan;
        sender = plan.sender;
        $("sender").textContent = sender;
        $("replay-case").textContent = `${plan.file}::${plan.case}`;
        $("replay").hidden = false;
        $("new-conversation").hidden = true;  // the scripted models answer one conversation
        showReplayStep();
        refreshTracker();
        refreshRecording();
        return;
      }
    } catch (exc) {
      addMessage("system", "could not read the replay: " + exc.message);
    }
    newConversation();
  }
  start();
})();
