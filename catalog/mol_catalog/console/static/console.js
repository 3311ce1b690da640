// The console's scripts: publish with upload progress, the adapter page's live event
// feed, the stack page's refresh and the playground's streamed chat, whose HTML answers
// run in a sandboxed frame. Requests that change something repeat the CSRF cookie's
// value (the page's csrf-token meta tag).
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
        row.querySelector(".ttft").textContent = e.live.ttft_text;
        row.querySelector(".latency").textContent = e.live.latency_text;
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

// --- the ui expert's answers, rendered ------------------------------------------------
// An answer that is one HTML document (the ui expert's; or any answer that is a whole
// document, fenced as ```html or not) is shown running, in a frame that can do nothing
// but run its own scripts. sandbox="allow-scripts" without allow-same-origin gives it an
// opaque origin: this page, its cookies, its storage and its CSRF token are out of reach.
// A CSP put first in its <head> allows inline script and style and data: images only,
// so it loads and fetches nothing (WebRTC, which no CSP governs, aside: docs/console.md);
// the playground page's own CSP (frame-src 'none') stops the frame from navigating
// itself to a URL. It is given the answer's text and nothing
// else, and this page listens to no message from it.
const ARTIFACT_CSP = "default-src 'none'; style-src 'unsafe-inline'; "
  + "script-src 'unsafe-inline'; img-src data:";

function htmlDocument(text, expert) {
  const fenced = /```html[^\S\n]*\n([\s\S]*?)(?:\n```|$)/i.exec(text);
  const candidate = (fenced ? fenced[1] : text).trim();
  if (/^(<!doctype html|<html[\s>])/i.test(candidate)) return candidate;
  if (expert === "ui" && /^<[a-z!]/i.test(candidate)) return candidate;
  return null;
}

function artifactSource(html) {
  // Parsed here first (an inert document: nothing in it runs or loads), so the CSP
  // lands before anything the answer has, wherever its own <head> or scripts were.
  const doc = new DOMParser().parseFromString(html, "text/html");
  const meta = doc.createElement("meta");
  meta.setAttribute("http-equiv", "Content-Security-Policy");
  meta.setAttribute("content", ARTIFACT_CSP);
  doc.head.prepend(meta);
  return `<!DOCTYPE html>\n${doc.documentElement.outerHTML}`;
}

function renderArtifact(box, source, html) {
  // The sandbox is set before the content and before the frame joins the page: a frame
  // takes its flags when it loads.
  const frame = el("iframe", {sandbox: "allow-scripts", referrerpolicy: "no-referrer",
    class: "artifact", title: "The answer's HTML document, running in a sandbox"});
  frame.srcdoc = artifactSource(html);
  const toggle = el("button", {type: "button", class: "link", "aria-controls": source.id,
    "aria-expanded": "false"}, "Show the source");
  toggle.addEventListener("click", () => {
    source.hidden = !source.hidden;
    toggle.setAttribute("aria-expanded", String(!source.hidden));
    toggle.textContent = source.hidden ? "Show the source" : "Hide the source";
  });
  box.replaceChildren(el("div", {class: "artifact-bar"},
    el("span", {class: "hint"}, "Rendered in a sandbox: its scripts run, it loads nothing and cannot reach this page."),
    toggle), frame);
  box.hidden = false;
  source.hidden = true;
}

// --- the playground ----------------------------------------------------------------
function initChat(form) {
  const answer = document.getElementById("answer");
  const artifact = document.getElementById("artifact");
  const status = document.getElementById("chat-status");
  const show = (id, value) => { document.getElementById(id).textContent = value || "none"; };
  const say = (text, problem = false) => {
    status.textContent = text;
    status.classList.toggle("problem", problem);
    status.classList.toggle("hint", !problem);
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    answer.textContent = "";
    answer.hidden = false;
    artifact.replaceChildren();
    artifact.hidden = true;
    say("Waiting for the first token ...");
    for (const id of ["h-expert", "h-version", "h-canary", "h-route", "h-handoff"]) show(id, "");
    const started = performance.now();
    let r;
    try {
      r = await fetch("/ui/playground/chat", {
        method: "POST",
        headers: {"content-type": "application/json", "x-csrf-token": csrf()},
        body: JSON.stringify({model: form.model.value, stream: true,
          max_tokens: Number(form.max_tokens.value),
          messages: [{role: "user", content: form.prompt.value}]}),
      });
    } catch (err) {
      say(`No answer: the catalog could not be reached (${err.message}).`, true);
      return;
    }
    let expert = r.headers.get("x-mol-expert");
    show("h-expert", expert);
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
      expert = to;
      show("h-handoff", chain);
    };
    if (!r.ok) {
      const text = await r.text().catch(() => "");
      let message = text;
      try { const b = JSON.parse(text); message = (b.error && (b.error.message || b.detail)) || text; } catch {}
      say(`The router answered ${r.status}: ${message}`, true);
      return;
    }
    // The stream ends with "data: [DONE]". An error event, a broken connection or an
    // end without [DONE] leave the text received so far, and say that it broke off.
    let text = "", first = null, finished = false, failure = null;
    const received = (piece) => {
      if (first === null) {
        first = performance.now() - started;
        say(`Receiving the answer (first token after ${Math.round(first)} ms) ...`);
      }
      text += piece;
      answer.textContent = text;
    };
    try {
      if (!(r.headers.get("content-type") || "").includes("text/event-stream")) {
        const whole = await r.json();
        received(whole.choices[0].message.content || "");
        finished = true;
      } else {
        const reader = r.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
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
            if (data === "[DONE]") { finished = true; continue; }
            let chunk;
            try { chunk = JSON.parse(data); } catch { continue; }  // a line cut by a break
            if (chunk.error) {
              failure = chunk.error.message || JSON.stringify(chunk.error);
              continue;
            }
            const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
            if (delta && delta.content) received(delta.content);
          }
        }
      }
    } catch (err) {
      failure = `the connection was lost (${err.message})`;
    }
    if (failure === null && !finished) failure = "the stream ended before the answer was complete";
    if (failure !== null) {
      const where = text ? `after ${text.length} characters` : "before its first token";
      say(`The answer broke off ${where}: ${failure}.`, true);
      return;
    }
    say(`Done: first token after ${Math.round(first || 0)} ms, whole answer ${Math.round(performance.now() - started)} ms.`);
    const html = htmlDocument(text, expert);
    if (html !== null) renderArtifact(artifact, answer, html);
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
