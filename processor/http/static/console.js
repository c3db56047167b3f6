// The kafka-sow console: plain JavaScript, no framework, no bundle (docs/console.md).
// Every figure comes from the JSON API of the service that serves this page.
"use strict";

const page = document.getElementById("page");
const statusLine = document.getElementById("status");
let timer = null;          // the current page's refresh
let stream = null;         // the topic page's live subscription (EventSource)
let lastOverview = null;   // {time, topics} of the previous refresh, for rates

// ---- small helpers ------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value, digits = 0) {
  if (value === undefined || value === null || Number.isNaN(value)) return "–";
  return Number(value).toLocaleString("en-US", { maximumFractionDigits: digits });
}

async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  const response = await fetch(path, options);
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
  return answer;
}

function table(headers, rows, attrs = {}) {
  return el("table", attrs,
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function tile(label, value, id) {
  return el("div", { class: "tile", id }, el("div", { class: "label" }, label),
    el("div", { class: "value" }, value));
}

// ---- charts: SVG polylines over the service's history ---------------------------------

function chart(title, series, width = 360, height = 120) {
  const svgNS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const all = series.flatMap((s) => s.points.map((p) => p[1]));
  const times = series.flatMap((s) => s.points.map((p) => p[0]));
  const max = Math.max(1, ...all);
  const t0 = Math.min(...times), t1 = Math.max(...times, t0 + 1);
  const colours = ["#1f6feb", "#2e7d32", "#b26a00", "#c62828", "#6a1b9a"];
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const line = document.createElementNS(svgNS, "polyline");
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", colours[i % colours.length]);
    line.setAttribute("stroke-width", "1.5");
    line.setAttribute("points", s.points.map(([t, v]) =>
      `${((t - t0) / (t1 - t0)) * (width - 4) + 2},${height - 14 - (v / max) * (height - 24)}`).join(" "));
    svg.append(line);
  });
  const label = document.createElementNS(svgNS, "text");
  label.setAttribute("x", 4);
  label.setAttribute("y", height - 2);
  label.setAttribute("font-size", "10");
  label.textContent = `max ${fmt(max, 1)} · ${series.map((s) => s.name).join(", ")}`;
  svg.append(label);
  return el("div", { class: "chart" }, el("div", { class: "title" }, title), svg);
}

function rateSeries(samples, read) {
  const points = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = samples[i].time - samples[i - 1].time;
    if (dt > 0) points.push([samples[i].time, Math.max(0, (read(samples[i]) - read(samples[i - 1])) / dt)]);
  }
  return points;
}

async function charts(topicNames) {
  const samples = await api("/api/history");
  const box = el("div", { class: "charts", id: "charts" });
  const sum = (s, key) => Object.values(s.topics).reduce((a, t) => a + (t[key] || 0), 0);
  box.append(chart("publishes / s (all topics)", [{ name: "publishes", points: rateSeries(samples, (s) => sum(s, "publishes")) }]));
  box.append(chart("input lag (records)", [{ name: "lag", points: samples.map((s) => [s.time, sum(s, "input_lag")]) }]));
  box.append(chart("replica staleness (s)", [{ name: "staleness", points: samples.map((s) => [s.time, s.totals.replica_staleness_s || 0]) }]));
  box.append(chart("dead letters / s", [{ name: "dead letters", points: rateSeries(samples, (s) => s.totals.dead_letters || 0) }]));
  for (const name of topicNames.slice(0, 4)) {
    box.append(chart(`${name}: records`, [{ name, points: samples.filter((s) => s.topics[name]).map((s) => [s.time, s.topics[name].records]) }]));
  }
  return box;
}

// ---- pages --------------------------------------------------------------------------

async function overview() {
  const [data, topics] = await Promise.all([api("/api/overview"), api("/api/topics")]);
  const now = Date.now() / 1000;
  const rate = (name) => {
    if (!lastOverview || !lastOverview.topics[name] || !data.topics[name]) return 0;
    const before = lastOverview.topics[name], after = data.topics[name];
    const changes = (after.publishes || 0) + (after.deletes || 0) - (before.publishes || 0) - (before.deletes || 0);
    return Math.max(0, changes / Math.max(now - lastOverview.time, 0.001));
  };
  const t = data.totals;
  const rows = topics.map((topic) => {
    const row = data.topics[topic.name] || {};
    return el("tr", { "data-topic": topic.name },
      el("td", {}, el("a", { href: `#/topic/${encodeURIComponent(topic.name)}` }, topic.name)),
      el("td", {}, topic.kind), el("td", {}, topic.message_type),
      el("td", { class: "num records" }, fmt(row.records)),
      el("td", { class: "num publishes" }, fmt(row.publishes)),
      el("td", { class: "num rate" }, fmt(rate(topic.name), 1)),
      el("td", { class: "num lag" }, fmt(row.input_lag)),
      el("td", { class: "num" }, fmt(row.changelog_lag)));
  });
  lastOverview = { time: now, topics: data.topics };
  let letters = [];
  try {
    letters = await api("/api/dead-letters?max=10");
  } catch (error) {  // the dead-letter topic unreadable: the rest of the page still shows
    letters = [{ offset: "", reason: "unreadable", message: error.message, source: "", value: "" }];
  }
  return [
    el("h2", {}, "Overview"),
    el("p", { class: "muted", id: "broker" }, data.broker || ""),
    el("div", { class: "tiles" },
      tile("ready", data.not_ready ? `no: ${data.not_ready}` : "yes", "tile-ready"),
      tile("records applied", fmt(t.records_applied), "tile-applied"),
      tile("dead letters", fmt(t.dead_letters), "tile-dead-letters"),
      tile("expirations", fmt(t.expirations), "tile-expirations"),
      tile("stalls", fmt(t.stalls), "tile-stalls"),
      tile("recovering partitions", fmt(t.recovering_partitions), "tile-recovering"),
      tile("records restored", fmt(t.restored_records), "tile-restored"),
      tile("replica staleness (s)", fmt(t.replica_staleness_s, 3), "tile-staleness"),
      tile("subscriptions", fmt(t.subscriptions), "tile-subscriptions")),
    el("h2", {}, "Topics"),
    table(["topic", "kind", "type", "records", "publishes", "changes/s", "input lag", "changelog lag"], rows, { id: "topics" }),
    el("h2", {}, "Rates and lags, last minutes"),
    await charts(topics.filter((x) => x.kind !== "plain").map((x) => x.name)),
    el("h2", {}, "Latest dead letters"),
    deadLetterTable(letters)];
}

function deadLetterTable(letters) {
  return table(["offset", "reason", "message", "source", "value"], letters.map((l) =>
    el("tr", {}, el("td", { class: "num" }, l.offset), el("td", { class: "reason" }, l.reason),
      el("td", {}, l.message), el("td", {}, l.source), el("td", { class: "data" }, l.value))),
  { id: "dead-letters" });
}

async function deadLetters() {
  return [el("h2", {}, "Dead letters"), deadLetterTable(await api("/api/dead-letters?max=200"))];
}

function recordRows(records) {
  return records.map((r) => el("tr", {},
    el("td", { class: "num" }, r.sow_key), el("td", { class: "data" }, r.data),
    el("td", {}, r.position),
    el("td", {}, r.queue_state ? (r.queue_state.leased ? `leased to ${r.queue_state.leased_to}` : "available") : "")));
}

function topicPage(name) {
  const field = (id, label, value = "") => el("label", {}, label, el("input", { id, value }));
  const output = el("div", { id: "query-output" });
  const live = el("ul", { class: "live", id: "live" });
  const liveState = el("span", { class: "muted", id: "live-state" }, "not subscribed");
  const form = el("form", { class: "query", id: "query-form", onsubmit: (e) => { e.preventDefault(); runQuery(name, output); } },
    field("filter", "filter"), field("order-by", "order by"), field("top-n", "top n"),
    field("grouping", "grouping"), field("projection", "projection"), field("select", "select"),
    el("div", {}, el("button", { id: "run-query", type: "submit" }, "Query")));
  const subscribe = () => {
    if (stream) stream.close();
    live.replaceChildren();
    const filter = document.getElementById("live-filter").value;
    const params = new URLSearchParams({ topic: name, filter, oof: "1", sow: "0" });
    stream = new EventSource(`/api/subscribe?${params}`);
    stream.addEventListener("registered", () => { liveState.textContent = "subscribed"; });
    stream.addEventListener("changes", (e) => {
      for (const change of JSON.parse(e.data)) {
        const label = change.kind === "oof" ? `OOF (${change.oof_reason})` : change.kind;
        live.prepend(el("li", { class: `change change-${change.kind}`, "data-sow-key": change.sow_key },
          el("span", { class: `badge ${change.kind}` }, label), change.record.data));
      }
    });
    stream.addEventListener("end", (e) => { liveState.textContent = `ended: ${JSON.parse(e.data).error}`; stream.close(); });
    stream.onerror = () => { if (stream.readyState === EventSource.CLOSED) liveState.textContent = "disconnected"; };
  };
  page.replaceChildren(
    el("h2", {}, `Topic ${name}`),
    el("div", { class: "columns" },
      el("section", {}, el("h2", {}, "Query"), form, output),
      el("section", {}, el("h2", {}, "Live subscription"),
        el("label", {}, "filter ", el("input", { id: "live-filter" })), " ",
        el("button", { id: "subscribe", onclick: subscribe }, "Subscribe"), " ",
        el("button", { class: "secondary", onclick: () => { if (stream) stream.close(); liveState.textContent = "not subscribed"; } }, "Stop"),
        " ", liveState, live)));
}

async function runQuery(name, output) {
  const value = (id) => document.getElementById(id).value;
  const body = { topic: name, filter: value("filter"), order_by: value("order-by"), top_n: Number(value("top-n") || 0),
    grouping: value("grouping"), projection: value("projection"), select: value("select") };
  try {
    const answer = await api("/api/query", body);
    const end = answer.group_end;
    output.replaceChildren(
      el("p", { class: "muted", id: "query-summary" }, `${end.records_returned} records of ${end.matches} matches, ${fmt(end.elapsed_us)} µs, plan ${end.plan}`),
      table(["SowKey", "data", "position", "queue"], recordRows(answer.records), { id: "results" }));
  } catch (error) {
    output.replaceChildren(el("p", { class: "error", id: "query-error" }, error.message));
  }
}

async function queues() {
  const [data, topics] = await Promise.all([api("/api/overview"), api("/api/topics")]);
  const names = topics.filter((t) => t.kind === "queue").map((t) => t.name);
  const rows = names.map((name) => {
    const q = data.queues[name] || {};
    const backlogs = Object.entries(q.backlogs || {}).map(([sub, n]) => `${sub}: ${fmt(n)}`).join(", ");
    return el("tr", { "data-queue": name },
      el("td", {}, el("a", { href: `#/topic/${encodeURIComponent(name)}` }, name)),
      el("td", { class: "num depth" }, fmt(q.messages)), el("td", { class: "num leased" }, fmt(q.leased)),
      el("td", { class: "num" }, fmt(q.subscriptions)), el("td", { class: "num" }, fmt(q.delivered)),
      el("td", { class: "num" }, fmt(q.acked)), el("td", { class: "num" }, fmt(q.expired)), el("td", {}, backlogs || "–"));
  });
  return [el("h2", {}, "Queues"),
    table(["queue", "depth", "leased", "subscriptions", "delivered", "acknowledged", "expired", "backlog per subscriber"], rows, { id: "queues" })];
}

async function views() {
  const [data, topics] = await Promise.all([api("/api/overview"), api("/api/topics")]);
  const rows = topics.filter((t) => t.kind === "view" || t.kind === "conflated").map((t) =>
    el("tr", { "data-view": t.name }, el("td", {}, el("a", { href: `#/topic/${encodeURIComponent(t.name)}` }, t.name)),
      el("td", {}, t.kind), el("td", { class: "num" }, fmt((data.topics[t.name] || {}).records)),
      el("td", { class: "num" }, fmt((data.topics[t.name] || {}).input_lag))));
  return [el("h2", {}, "Views and conflated topics"), table(["view", "kind", "records", "input lag"], rows, { id: "views" })];
}

async function clients() {
  const [connected, subscriptions] = await Promise.all([api("/api/clients"), api("/api/subscriptions")]);
  const clientRows = connected.map((c) => el("tr", { "data-client": c.name },
    el("td", {}, c.name), el("td", {}, c.connection), el("td", {}, new Date(c.since * 1000).toLocaleTimeString()),
    el("td", {}, c.subscriptions.map((s) => `${s.sub_id} on ${s.topic}${s.filter ? ` where ${s.filter}` : ""} (backlog ${fmt(s.backlog)})`).join("; ") || "–")));
  const rows = subscriptions.map((s) => el("tr", {},
    el("td", {}, s.principal), el("td", {}, s.sub_id), el("td", {}, s.topic), el("td", { class: "data" }, s.filter),
    el("td", { class: "num" }, fmt(s.delivered)), el("td", { class: "num backlog" }, fmt(s.backlog))));
  return [el("h2", {}, "Clients"),
    table(["client", "connection", "since", "subscriptions"], clientRows, { id: "clients" }),
    el("h2", {}, "Subscriptions"),
    el("p", { class: "muted" }, "A subscriber whose backlog grows is a slow consumer; past its max_backlog it is disconnected."),
    table(["principal", "sub_id", "topic", "filter", "delivered", "backlog"], rows, { id: "subscriptions" })];
}

// ---- routing -----------------------------------------------------------------------

const routes = { "": overview, "queues": queues, "views": views, "clients": clients, "dead-letters": deadLetters };

let generation = 0;  // which route is shown: a refresh of an older one draws nothing

async function show() {
  clearInterval(timer);
  const mine = ++generation;
  const hash = location.hash.replace(/^#\/?/, "");
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.getAttribute("href") === `#/${hash}`));
  if (hash.startsWith("topic/")) {
    topicPage(decodeURIComponent(hash.slice(6)));
    return;
  }
  if (stream) { stream.close(); stream = null; }
  const render = routes[hash] || overview;
  const refresh = async () => {
    try {
      const nodes = await render();
      if (mine !== generation) return;
      page.replaceChildren(...nodes);
      statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
      statusLine.className = "status ok";
    } catch (error) {
      if (mine !== generation) return;
      statusLine.textContent = error.message;
      statusLine.className = "status bad";
    }
  };
  await refresh();
  timer = setInterval(refresh, 1000);
}

window.addEventListener("hashchange", show);
show();
