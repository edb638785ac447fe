// The dashboard: one server-sent event per tick (see intcollector's
// web/dashboard.rs for its fields), folded into the charts and tables.
"use strict";

const $ = id => document.getElementById(id);
const charts = {};
const flows = new Map();      // flow -> {path, rate, path_ns, hops, seen}
let selected = null, ticks = 0, lastT = 0;
// Rates are taken over the last RATE_TICKS ticks: reports come once per
// flow and interval, which a single 500 ms tick would show as 0, 2, 0, 2.
const RATE_TICKS = 4;
const recent = [];            // [t, reports delta, gaps delta, {flow: reports}]

function rate(pick) {
  if (recent.length < 2) return null;
  const span = (recent[recent.length - 1][0] - recent[0][0]) / 1000;
  let n = 0;
  for (let i = 1; i < recent.length; i++) n += pick(recent[i]);
  return span > 0 ? n / span : null;
}

function chart(id, opts) { charts[id] = new TimeChart($(id), opts); return charts[id]; }

function setup(points) {
  const o = { maxPoints: points };
  chart("hop-latency", { ...o, unit: "µs", scale: 1000 });
  chart("hop-queue", { ...o, unit: "cells" });
  chart("path-latency", { ...o, unit: "ms", scale: 1e6 });
  chart("reports", { ...o, unit: "/s" });
  chart("ampm-loss", { ...o, unit: "pkts", bars: true });
  chart("ampm-delay", { ...o, unit: "ms", scale: 1e6 });
  chart("events", { ...o, unit: "/s" });
  chart("evictions", { ...o, unit: "/s" });
  chart("label", { ...o, unit: "%" });
  chart("gpint", { ...o, unit: "%" });
}

function hopSeries(flow, t) {
  const f = flows.get(flow);
  if (!f || !f.last) return;
  f.last.hops.forEach((h, i) => {
    const name = `hop ${i} node ${h.node ?? "?"}`;
    charts["hop-latency"].push(name, t, h.lat);
    charts["hop-queue"].push(name, t, h.q);
  });
}

function select(flow) {
  selected = flow;
  charts["hop-latency"].clear();
  charts["hop-queue"].clear();
  const f = flows.get(flow);
  if (f) for (const [t, tick] of f.history) { f.last = tick; hopSeries(flow, t); }
  $("sel-flow").textContent = flow ? "— " + flow : "";
  renderFlows();
}

function onTick(tk) {
  if (!ticks) setup(tk.points || 600);
  ticks++;
  const t = tk.t, dt = lastT ? Math.max((t - lastT) / 1000, 0.001) : 0.5;
  lastT = t;
  const perFlow = {};
  for (const [name, f] of Object.entries(tk.flows)) perFlow[name] = f.reports;
  recent.push([t, tk.delta.reports, tk.delta.report_gaps, perFlow]);
  if (recent.length > RATE_TICKS + 1) recent.shift();
  for (const [name, f] of Object.entries(tk.flows)) {
    let st = flows.get(name);
    if (!st) { st = { history: [] }; flows.set(name, st); }
    st.last = f; st.path = f.path;
    st.history.push([t, f]);
    if (st.history.length > (tk.points || 600)) st.history.shift();
    charts["path-latency"].push(name, t, f.path_ns);
    if (selected === null) select(name);
    else if (name === selected) hopSeries(name, t);
  }
  for (const [name, st] of flows) st.rate = rate(r => r[3][name] || 0) || 0;
  charts["reports"].push("reports/s", t, rate(r => r[1]));
  charts["reports"].push("sequence gaps/s", t, rate(r => r[2]));
  for (const a of tk.ampm) {
    charts["ampm-loss"].push(a.flow, t, a.loss_packets);
    charts["ampm-delay"].push(a.flow, t, a.mean_delay_ns);
  }
  counts(charts["events"], tk.events, t, dt);
  const list = $("events-list");
  for (const e of tk.events_listed) {
    const li = document.createElement("li");
    const f = e.flow || {};
    li.textContent = `${new Date(t).toLocaleTimeString()} ${e.events.join(",")} hop ${e.hop ?? "e2e"} node ${e.node_id ?? "-"} ${f.src ?? ""}:${f.src_port ?? ""}>${f.dst ?? ""}:${f.dst_port ?? ""}`;
    list.prepend(li);
    while (list.children.length > 50) list.lastChild.remove();
  }
  counts(charts["evictions"], tk.evictions, t, dt);
  if (tk.label) {
    charts["label"].push("coverage (arrival)", t, 100 * tk.label.coverage_arrival);
    charts["label"].push("coverage (label time)", t, 100 * tk.label.coverage_label);
  }
  for (const g of tk.gpint || []) {
    charts["gpint"].push("switches covered", t, 100 * g.coverage);
    const li = document.createElement("li");
    li.textContent = `session ${g.session}: ${(100 * g.coverage).toFixed(0)} % covered in ${g.elapsed_ms.toFixed(1)} ms, ` +
      `${g.probes} probes, ${g.recovery_probes} recoveries, ${g.timeouts} timeouts` +
      (g.complete ? "" : ", incomplete") + (g.unavailable && g.unavailable.length ? `, unavailable ${g.unavailable.join(" ")}` : "");
    $("gpint-list").prepend(li);
    while ($("gpint-list").children.length > 20) $("gpint-list").lastChild.remove();
  }
  renderLosses(tk);
  renderFlows();
  $("status").textContent = `live · ${ticks} ticks · ${flows.size} flows` +
    (tk.hidden_reports ? ` · ${tk.hidden_reports} reports of flows beyond the shown ones` : "");
}

// Per-tick counts by name as rates; a name a tick lacks is 0 then.
function counts(ch, byName, t, dt) {
  for (const name of ch.series.keys()) if (!(name in byName)) ch.push(name, t, 0);
  for (const [name, n] of Object.entries(byName)) ch.push(name, t, n / dt);
}

function us(ns) { return ns === null || ns === undefined ? "–" : (ns / 1000).toFixed(1) + " µs"; }
function ms(ns) { return ns === null || ns === undefined ? "–" : (ns / 1e6).toFixed(2) + " ms"; }

function renderFlows() {
  const body = $("flows").tBodies[0];
  body.textContent = "";
  for (const [name, f] of flows) {
    const tr = body.insertRow();
    if (name === selected) tr.className = "sel";
    tr.onclick = () => select(name);
    const hops = f.last ? f.last.hops : [];
    const cells = [name, (f.path || []).map(n => n ?? "?").join(" → "), f.rate.toFixed(1),
      ms(f.last && f.last.path_ns), hops.map(h => us(h.lat)).join(" | "),
      hops.map(h => h.q ?? "–").join(" | ")];
    cells.forEach((c, i) => { const td = tr.insertCell(); td.textContent = c; if (i === 2) td.className = "num"; });
  }
}

function renderLosses(tk) {
  const rows = [
    ["reports received", tk.totals.reports, false],
    ["report sequence gaps", tk.totals.report_gaps, true],
    ["bad report packets", tk.totals.bad_packets, true],
    ["AM-PM records lost", tk.totals.ampm_records_lost, true],
    ["analytics records lost", tk.totals.analytics_records_lost, true],
    ["dashboard: points skipped", tk.web.skipped, true],
    ["dashboard: ticks a browser missed", tk.web.client_dropped, true],
  ];
  const body = $("losses").tBodies[0];
  body.textContent = "";
  for (const [name, v, bad] of rows) {
    const tr = body.insertRow();
    tr.insertCell().textContent = name;
    const td = tr.insertCell();
    td.textContent = v;
    td.className = "num" + (bad && v > 0 ? " bad" : "");
  }
}

function drawAll() {
  for (const c of Object.values(charts)) c.draw();
}

const es = new EventSource("/events");
es.onmessage = m => { try { onTick(JSON.parse(m.data)); } catch (e) { $("status").textContent = "bad tick: " + e; } };
es.onerror = () => { $("status").textContent = "disconnected; retrying…"; };
setInterval(drawAll, 500);
