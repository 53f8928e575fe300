"""The page at ``GET /``: one static HTML file with a small script, no outside resources.

It asks the server for everything it shows (``/info``: the model's card summary; ``/search`` with ``explain``:
hits and the terms behind each score; ``/embed_sparse`` with ``return_tokens`` when no index is served), sending
the API key the user typed when the server wants one (kept in the tab's ``sessionStorage``). Every text that comes
from the server or the user is put in the page with ``textContent`` (never ``innerHTML``), so a document holding
markup shows it as text. The shell itself holds no data: it is the one route besides ``/health`` served without
a key.
"""

from __future__ import annotations

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'">
<title>spladekit serve</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 60rem; padding: 1rem 1.5rem;
    color: #1d232a; }
  h1 { font-size: 1.35rem; margin: .2rem 0 .6rem; }
  h1 small { color: #667; font-weight: normal; font-size: .95rem; }
  #card { background: #f4f6f8; border-radius: 6px; padding: .6rem .9rem; margin-bottom: 1rem; font-size: .9rem; }
  #card dl { display: grid; grid-template-columns: max-content 1fr; gap: .1rem 1rem; margin: 0; }
  #card dt { color: #556; } #card dd { margin: 0; }
  #card p { margin: .5rem 0 0; color: #334; }
  form { display: flex; gap: .5rem; margin-bottom: 1rem; }
  input[type=text], input[type=password] { flex: 1; font-size: 1rem; padding: .45rem .6rem; border: 1px solid #aab;
    border-radius: 5px; }
  button { font-size: 1rem; padding: .45rem 1rem; border-radius: 5px; border: 1px solid #2a5db0; background: #2a5db0;
    color: #fff; cursor: pointer; }
  select { font-size: 1rem; }
  #status { color: #667; margin: .3rem 0 .8rem; min-height: 1.2em; }
  #status.error { color: #b00020; }
  ol#hits { padding-left: 0; list-style: none; }
  li.hit { border: 1px solid #dde2e8; border-radius: 6px; padding: .6rem .8rem; margin-bottom: .7rem; }
  .hit-head { display: flex; gap: .8rem; align-items: baseline; }
  .rank { color: #889; } .doc-id { font-weight: 600; } .score { margin-left: auto; font-variant-numeric: tabular-nums; }
  .text { margin: .35rem 0; color: #334; white-space: pre-wrap; }
  mark { background: #ffe58f; border-radius: 2px; padding: 0 1px; }
  ul.terms { display: flex; flex-wrap: wrap; gap: .3rem; padding: 0; margin: .3rem 0 0; list-style: none; }
  ul.terms li { background: #e8f0fe; border-radius: 4px; padding: .05rem .45rem; font-size: .85rem; }
  ul.terms li b { font-weight: 600; margin-right: .3rem; }
  #key-form { display: none; }
</style>
</head>
<body>
<h1>spladekit serve <small id="model-name"></small></h1>
<form id="key-form">
  <input id="api-key" type="password" placeholder="API key (this server wants one)" autocomplete="off">
  <button id="key-button" type="submit">Use key</button>
</form>
<section id="card"><dl id="card-facts"></dl><p id="card-text"></p></section>
<form id="search-form">
  <input id="query" type="text" placeholder="Search…" autocomplete="off" autofocus>
  <select id="k" title="hits"><option>5</option><option selected>10</option><option>20</option></select>
  <button id="search-button" type="submit">Search</button>
</form>
<div id="status"></div>
<section id="query-terms"></section>
<ol id="hits"></ol>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let served = null;

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function status(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

async function call(path, body) {
  const headers = {};
  const key = sessionStorage.getItem("spladekit-api-key");
  if (key) headers["Authorization"] = "Bearer " + key;
  const options = { method: body === undefined ? "GET" : "POST", headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  if (response.status === 401) {
    $("key-form").style.display = "flex";
    throw new Error("this server wants an API key");
  }
  const payload = await response.json();
  if (!response.ok) throw new Error(payload.error || ("HTTP " + response.status));
  return payload;
}

function fmt(value) { return Number(value).toFixed(3); }

function showCard(info) {
  const model = info.spladekit.model;
  $("model-name").textContent = info.model_id;
  const facts = $("card-facts");
  facts.replaceChildren();
  const rows = [
    ["kind", model.kind],
    ["backbone", model.backbone],
    ["architecture", model.architecture],
    ["parameters", model.parameters === null ? null : Number(model.parameters).toLocaleString()],
    ["vocabulary", Number(model.vocab_size).toLocaleString()],
    ["token limits", "documents " + model.max_length + ", queries " + model.query_max_length],
    ["rescale", model.rescale ? JSON.stringify(model.rescale) : "none recorded"],
  ];
  const index = info.spladekit.index;
  if (index) rows.push(["index", index.backend + ", " + Number(index.documents).toLocaleString() + " documents" +
                        (index.collection ? " (with text)" : "")]);
  for (const [name, value] of rows) {
    if (value === null || value === undefined) continue;
    facts.append(element("dt", name), element("dd", value));
  }
  $("card-text").textContent = model.card || "";
  $("query").placeholder = index ? "Search the index…" : "A text to encode (no index is served)…";
}

function highlighted(text, terms) {
  const fragment = document.createDocumentFragment();
  for (const part of text.split(/([\p{L}\p{N}]+)/u)) {
    const weight = terms.get(part.toLowerCase());
    if (weight === undefined) { fragment.append(document.createTextNode(part)); continue; }
    const mark = element("mark", part);
    mark.title = "contribution " + fmt(weight);
    fragment.append(mark);
  }
  return fragment;
}

function termList(pairs) {
  const list = element("ul", null, "terms");
  for (const [term, weight, title] of pairs) {
    const item = element("li");
    item.append(element("b", term), document.createTextNode(fmt(weight)));
    if (title) item.title = title;
    list.append(item);
  }
  return list;
}

function showHits(result) {
  const hits = $("hits");
  hits.replaceChildren();
  const terms = $("query-terms");
  terms.replaceChildren();
  if (result.query_terms) {
    terms.append(element("div", "query terms"),
                 termList(result.query_terms.slice(0, 20).map((t) => [t.term, t.weight])));
  }
  for (const hit of result.hits) {
    const item = element("li", null, "hit");
    item.dataset.id = hit.id;
    const head = element("div", null, "hit-head");
    head.append(element("span", "#" + hit.rank, "rank"), element("span", hit.id, "doc-id"),
                element("span", fmt(hit.score), "score"));
    item.append(head);
    const contributions = hit.explanation ? hit.explanation.contributions : [];
    const byWord = new Map();
    for (const c of contributions) if (!c.term.startsWith("##")) byWord.set(c.term.toLowerCase(), c.contribution);
    if (hit.text !== null && hit.text !== undefined) {
      const text = element("div", null, "text");
      text.append(highlighted(hit.text, byWord));
      item.append(text);
    }
    if (contributions.length) {
      item.append(termList(contributions.map((c) => [c.term, c.contribution,
        "query " + fmt(c.query_weight) + " × document " + fmt(c.document_weight)])));
    }
    hits.append(item);
  }
}

async function search(query) {
  const k = Number($("k").value);
  status("searching…");
  const started = performance.now();
  const result = await call("/search", { query, k, explain: true });
  showHits(result);
  const ms = (performance.now() - started).toFixed(0);
  status(result.hits.length + " hits in " + ms + " ms");
  document.body.dataset.searched = String(Number(document.body.dataset.searched || 0) + 1);
}

async function encode(text) {
  status("encoding…");
  const result = await call("/embed_sparse", { inputs: text, return_tokens: true, side: "query" });
  const pairs = result[0].map((v) => [v.token, v.value]).sort((a, b) => b[1] - a[1]);
  $("hits").replaceChildren();
  $("query-terms").replaceChildren(element("div", pairs.length + " active terms"), termList(pairs.slice(0, 40)));
  status("");
}

async function load() {
  try {
    served = await call("/info");
    showCard(served);
    $("key-form").style.display = "none";
    status("");
  } catch (error) {
    status(error.message, true);
  }
}

$("search-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const query = $("query").value;
  if (!query.trim()) return;
  try {
    if (served === null) await load();
    if (served && served.spladekit.index) await search(query); else await encode(query);
  } catch (error) {
    status(error.message, true);
  }
});

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("spladekit-api-key", $("api-key").value);
  $("api-key").value = "";
  load();
});

load();
</script>
</body>
</html>
"""
