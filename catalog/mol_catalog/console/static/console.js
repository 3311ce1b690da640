// The console's scripts: publish with upload progress, the adapter page's live event
// feed, the stack page's refresh and the playground's streamed chat. Requests that
// change something repeat the CSRF cookie's value (the page's csrf-token meta tag).
"use strict";

const csrf = () => document.querySelector('meta[name="csrf-token"]').content;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c);
  return node;
}

// --- publish -------------------------------------------------------------------
const WANTED = ["adapter_config.json", "adapter_model.safetensors"];

function initPublish(form) {
  let files = [];
  const picked = document.getElementById("picked");
  const choose = (list) => {
    files = Array.from(list).filter((f) => WANTED.includes(f.name));
    const missing = WANTED.filter((w) => !files.some((f) => f.name === w));
    picked.textContent = missing.length ? `Missing: ${missing.join(", ")}`
      : `Ready: ${files.map((f) => `${f.name} (${f.size} bytes)`).join(", ")}`;
  };
  document.getElementById("pub-folder").addEventListener("change", (e) => choose(e.target.files));
  const drop = document.getElementById("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", async (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    choose(await droppedFiles(e.dataTransfer));
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const ns = form.namespace.value.trim(), name = form.name.value.trim();
    const result = document.getElementById("result");
    if (!ns || !name || files.length !== WANTED.length) {
      result.replaceChildren(el("p", {class: "problem", role: "alert"},
        "Fill in the namespace and name and choose a folder with both files."));
      return;
    }
    const body = new FormData();
    for (const f of files) body.append(f.name, f, f.name);
    for (const field of ["base", "alias"]) {
      if (form[field].value.trim()) body.append(field, form[field].value.trim());
    }
    if (form.tags.value.trim()) body.append("tags", form.tags.value.trim());
    const progress = document.getElementById("progress");
    progress.hidden = false;
    progress.value = 0;
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `/ui/publish/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`);
    xhr.setRequestHeader("x-csrf-token", csrf());
    xhr.upload.onprogress = (p) => { if (p.lengthComputable) progress.value = 100 * p.loaded / p.total; };
    xhr.onload = () => showPublished(result, xhr.status, xhr.responseText);
    xhr.onerror = () => result.replaceChildren(el("p", {class: "problem", role: "alert"}, "The upload failed: the catalog did not answer."));
    result.replaceChildren(el("p", {}, "Uploading ..."));
    xhr.send(body);
  });
}

async function droppedFiles(transfer) {
  const out = [];
  const walk = async (entry) => {
    if (entry.isFile) out.push(await new Promise((ok, bad) => entry.file(ok, bad)));
    else if (entry.isDirectory) {
      const entries = await new Promise((ok, bad) => entry.createReader().readEntries(ok, bad));
      for (const child of entries) await walk(child);
    }
  };
  const entries = Array.from(transfer.items || []).map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
  if (!entries.length) return Array.from(transfer.files);
  for (const entry of entries) await walk(entry);
  return out;
}

function showPublished(result, status, text) {
  let body;
  try { body = JSON.parse(text); } catch { body = {error: "Error", detail: text}; }
  if (status >= 400) {
    const items = (body.reasons || []).map((r) => el("li", {}, el("code", {}, r.code), " ", r.message));
    result.replaceChildren(el("p", {class: "problem", role: "alert"}, `${body.error}: ${body.detail}`),
      ...(items.length ? [el("ul", {}, ...items)] : []));
    return;
  }
  const link = el("a", {href: `/ui/adapters/${body.adapter}/versions/${body.version}`}, `${body.adapter} v${body.version}`);
  const rows = Object.entries(body.verdicts || {}).map(([profile, v]) => el("tr", {},
    el("td", {}, profile),
    el("td", {}, el("span", {class: v.compatible ? "ok" : "bad"}, v.compatible ? "compatible" : "incompatible")),
    el("td", {}, ...(v.reasons.length ? v.reasons.map((r) => el("div", {}, el("code", {}, r.code), " ", r.message)) : ["none"]))));
  const table = rows.length ? el("table", {class: "verdicts"}, el("caption", {}, "Verdict per serving profile"),
    el("thead", {}, el("tr", {}, el("th", {scope: "col"}, "Profile"), el("th", {scope: "col"}, "Verdict"), el("th", {scope: "col"}, "Reasons"))),
    el("tbody", {}, ...rows)) : el("p", {}, "No serving profile of this base model yet: no verdict.");
  result.replaceChildren(el("p", {role: "status"}, body.created ? "Published " : "Already published as ", link, "."), table);
}

// --- the adapter page's live event feed ----------------------------------------
function initFeed(list) {
  let after = Number(list.dataset.after);
  const adapter = list.dataset.adapter;
  const poll = async () => {
    try {
      const r = await fetch(`/ui/events?adapter=${encodeURIComponent(adapter)}&after=${after}`);
      if (r.ok) {
        const body = await r.json();
        for (const e of body.items) {
          const what = e.type === "alias.moved" ? `@${e.alias} → v${e.version}`
            : e.type === "eval.attached" ? `v${e.version} ${e.data.suite} ${e.data.suite_version}`
            : `v${e.version}`;
          list.prepend(el("li", {}, el("code", {}, e.type), ` ${what} at ${e.created_at}`));
        }
        after = body.last;
      }
    } finally {
      setTimeout(poll, 1000);
    }
  };
  poll();
}

// --- the stack page's figures ----------------------------------------------------
function initStack(root) {
  const refresh = async () => {
    try {
      const r = await fetch(root.dataset.url);
      if (!r.ok) return;
      const body = await r.json();
      for (const e of body.experts) {
        const row = root.querySelector(`tr[data-expert="${CSS.escape(e.name)}"]`);
        if (!row) continue;
        row.querySelector(".rate").textContent = e.live.rate === null ? "…" : e.live.rate.toFixed(2);
        row.querySelector(".ttft").textContent = e.live.ttft_ms === null ? "none yet" : `${Math.round(e.live.ttft_ms)} ms`;
        row.querySelector(".count").textContent = String(Math.round(e.live.requests));
      }
      root.querySelector("#engines").replaceChildren(...body.engines.map((g) => el("tr", {},
        el("td", {}, el("code", {}, g.url)), el("td", {}, g.ready ? "yes" : "no"),
        el("td", {}, `${g.running} / ${g.waiting}`),
        el("td", {}, `${Math.round(g.kv_cache_usage * 100)}%`),
        el("td", {}, ...(g.adapters.length ? g.adapters.flatMap((a) => [el("code", {}, a), " "]) : ["none "]),
          `(${g.max_lora || "?"} slots)`))));
    } finally {
      setTimeout(refresh, 2000);
    }
  };
  setTimeout(refresh, 2000);
}

// --- the playground ----------------------------------------------------------------
function initChat(form) {
  const answer = document.getElementById("answer");
  const status = document.getElementById("chat-status");
  const show = (id, value) => { document.getElementById(id).textContent = value || "none"; };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    answer.textContent = "";
    status.textContent = "Waiting for the first token ...";
    for (const id of ["h-expert", "h-version", "h-canary", "h-route", "h-handoff"]) show(id, "");
    const started = performance.now();
    const r = await fetch("/ui/playground/chat", {
      method: "POST",
      headers: {"content-type": "application/json", "x-csrf-token": csrf()},
      body: JSON.stringify({model: form.model.value, stream: true,
        max_tokens: Number(form.max_tokens.value),
        messages: [{role: "user", content: form.prompt.value}]}),
    });
    show("h-expert", r.headers.get("x-mol-expert"));
    show("h-version", r.headers.get("x-mol-adapter-version"));
    show("h-canary", r.headers.get("x-mol-canary") || "false");
    show("h-route", r.headers.get("x-mol-route"));
    // Hops as "chat → coding (demo/coding@v2)": the x-mol-handoffs header ("chat>coding")
    // of a whole answer, or a stream's ": mol-handoff chat>coding demo/coding@v2" comments.
    let chain = "";
    if (r.headers.get("x-mol-handoffs")) show("h-handoff", r.headers.get("x-mol-handoffs").split(">").join(" → "));
    const hop = (comment) => {
      const [pair, adapter] = comment.split(" ");
      const [from, to] = pair.split(">");
      chain = `${chain || from} → ${to}${adapter ? ` (${adapter})` : ""}`;
      show("h-handoff", chain);
    };
    if (!r.ok) {
      const text = await r.text();
      let message = text;
      try { const b = JSON.parse(text); message = (b.error && (b.error.message || b.detail)) || text; } catch {}
      status.textContent = `The router answered ${r.status}: ${message}`;
      return;
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", first = null;
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, cut).trimEnd();
        buffer = buffer.slice(cut + 1);
        if (line.startsWith(": mol-handoff ")) hop(line.slice(14));
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (delta && delta.content) {
          if (first === null) first = performance.now() - started;
          answer.textContent += delta.content;
        }
      }
    }
    status.textContent = `Done: first token after ${Math.round(first || 0)} ms, whole answer ${Math.round(performance.now() - started)} ms.`;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const publish = document.getElementById("publish");
  if (publish) initPublish(publish);
  const feed = document.getElementById("feed");
  if (feed) initFeed(feed);
  const stackRoot = document.getElementById("stack");
  if (stackRoot) initStack(stackRoot);
  const chat = document.getElementById("chat");
  if (chat) initChat(chat);
});
