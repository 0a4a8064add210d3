// kbroker console: polls /api/state and renders it. Names come from clients (topics, groups,
// client ids), so everything is set as text, never as HTML.
"use strict";

const charts = {};
let refreshMs = 2000;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(child ?? "–"));
  }
  return node;
}

function num(value) {
  return value === null || value === undefined ? "–" : value.toLocaleString("en-US");
}

function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (value >= 1024 && i < units.length - 1) { value /= 1024; i++; }
  return `${value.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function cell(value, attrs) {
  return el("td", Object.assign({ class: "num" }, attrs || {}), value);
}

function renderCluster(snapshot) {
  const c = snapshot.cluster;
  document.getElementById("cluster").textContent =
    `cluster ${c.cluster_id ?? "?"} · ${c.brokers.length} broker(s) · controller ${c.controller}`;
  const body = document.querySelector("#brokers tbody");
  body.replaceChildren(...c.brokers.map((b) =>
    el("tr", { "data-broker": b.id }, el("td", {}, String(b.id)), el("td", {}, b.host), cell(String(b.port)),
      el("td", {}, b.id === c.controller ? "controller" : "broker"))));
}

function renderTopics(snapshot) {
  const showInternal = document.getElementById("show-internal").checked;
  const rows = [];
  for (const topic of snapshot.topics) {
    if (topic.internal && !showInternal) continue;
    rows.push(el("tr", { class: "topic", "data-topic": topic.name },
      el("td", {}, topic.name, ...(topic.internal ? [el("span", { class: "badge" }, "internal")] : []),
        el("span", { class: "badge" }, `${topic.partitions.length} partition(s)`)),
      el("td"), el("td"), el("td"), el("td"), el("td"),
      cell(num(topic.messages), { "data-topic-messages": topic.name }), cell(bytes(topic.size))));
    for (const p of topic.partitions) {
      rows.push(el("tr", { class: p.under_replicated || p.leader < 0 ? "partition warn" : "partition",
                           "data-partition": `${topic.name}-${p.partition}` },
        el("td", {}, String(p.partition)), el("td", {}, p.leader < 0 ? "none" : String(p.leader)),
        el("td", {}, p.replicas.join(",")), el("td", {}, p.isr.join(",")),
        cell(num(p.log_start)), cell(num(p.log_end), { "data-log-end": `${topic.name}-${p.partition}` }),
        cell(p.log_end === null || p.log_start === null ? "–" : num(p.log_end - p.log_start)),
        cell(bytes(p.size))));
    }
  }
  document.querySelector("#topics tbody").replaceChildren(...rows);
}

function renderGroups(snapshot) {
  const blocks = snapshot.groups.map((g) => {
    const members = el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "member"), el("th", {}, "client id"), el("th", {}, "host"),
        el("th", {}, "assigned"))),
      el("tbody", {}, ...(g.members.length ? g.members.map((m) => el("tr", {}, el("td", {}, m.member_id),
        el("td", {}, m.client_id), el("td", {}, m.host), el("td", {}, m.assignment.join(", ") || "–")))
        : [el("tr", {}, el("td", { colspan: 4, class: "note" }, "no active members"))])));
    const lag = el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "topic"), el("th", {}, "partition"), el("th", { class: "num" }, "committed"),
        el("th", { class: "num" }, "end offset"), el("th", { class: "num" }, "lag"), el("th", {}, "owner"))),
      el("tbody", {}, ...g.partitions.map((p) => el("tr", {},
        el("td", {}, p.topic), cell(String(p.partition)), cell(num(p.committed)), cell(num(p.log_end)),
        cell(num(p.lag), { "data-lag": `${g.group_id}/${p.topic}-${p.partition}` }), el("td", {}, p.owner)))));
    return el("div", { class: "group", "data-group": g.group_id },
      el("h3", {}, g.group_id, el("span", { class: "badge", "data-group-state": g.group_id }, g.state),
        el("span", { class: "badge" }, `lag `, el("span", { "data-group-lag": g.group_id }, num(g.lag))),
        ...(g.error ? [el("span", { class: "badge" }, g.error)] : [])),
      members, lag);
  });
  document.getElementById("groups").replaceChildren(
    ...(blocks.length ? blocks : [el("p", { class: "note" }, "no consumer groups")]));
}

function chart(id, series, data, yLabel, format) {
  const target = document.getElementById(id);
  if (!charts[id]) {
    const width = Math.max(300, target.clientWidth || 500);
    const y = { label: yLabel, size: 80 };
    if (format) y.values = (u, ticks) => ticks.map(format);
    charts[id] = new uPlot({
      width, height: 220, series: [{}, ...series],
      axes: [{}, y],
      scales: { x: { time: true } },
    }, data, target);
  } else {
    charts[id].setData(data);
  }
}

function renderMetrics(metrics) {
  const times = metrics.times_ms.map((t) => t / 1000);
  const note = document.getElementById("metrics-note");
  if (!metrics.endpoints.length) {
    note.textContent = "No metrics endpoints given (kbroker console --metrics-url http://broker:9404/metrics): no charts.";
    return;
  }
  const errors = Object.entries(metrics.errors).map(([url, e]) => `${url}: ${e}`);
  note.textContent = `metrics from ${metrics.endpoints.join(", ")}` + (errors.length ? ` — failing: ${errors.join("; ")}` : "");
  chart("chart-bytes", [
    { label: "in", stroke: "#1f6feb", value: (u, v) => bytes(v) + "/s" },
    { label: "out", stroke: "#2da44e", value: (u, v) => bytes(v) + "/s" },
  ], [times, metrics.bytes_in_per_s, metrics.bytes_out_per_s], "per second", (v) => bytes(v));
  const q = Math.round(metrics.latency_quantile * 100);
  document.getElementById("latency-title").textContent = `Request latency, p${q} (ms)`;
  chart("chart-latency", Object.keys(metrics.latency_ms).map((api, i) =>
    ({ label: api, stroke: ["#8250df", "#bf8700"][i % 2], spanGaps: true })),
  [times, ...Object.values(metrics.latency_ms)], "ms");
}

function render(state) {
  refreshMs = Math.max(500, state.refresh_s * 1000);
  const status = document.getElementById("status");
  status.textContent = state.error ?? (state.snapshot ? `updated ${new Date(state.snapshot.updated_ms).toLocaleTimeString()}` : "");
  status.className = state.error ? "status error" : "status";
  if (state.snapshot) {
    renderCluster(state.snapshot);
    renderTopics(state.snapshot);
    renderGroups(state.snapshot);
  }
  renderMetrics(state.metrics);
  document.body.dataset.updated = state.snapshot ? String(state.snapshot.updated_ms) : "";
}

let last = null;

async function poll() {
  try {
    const response = await fetch("/api/state", { cache: "no-store" });
    last = await response.json();
    render(last);
  } catch (e) {
    const status = document.getElementById("status");
    status.textContent = `console unreachable: ${e}`;
    status.className = "status error";
  }
  setTimeout(poll, refreshMs);
}

document.getElementById("show-internal").addEventListener("change", () => last && last.snapshot && renderTopics(last.snapshot));
poll();
