// A small time-series chart on a canvas: named series of (time ms, value),
// each a bounded ring, drawn as lines over a shared time axis with a legend.
// canvas.dataset.points holds the number of points drawn (the browser test
// reads it).
"use strict";

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

class TimeChart {
  constructor(canvas, opts) {
    this.canvas = canvas;
    this.unit = opts.unit || "";
    this.scale = opts.scale || 1;     // value shown = value / scale
    this.maxPoints = opts.maxPoints || 600;
    this.bars = !!opts.bars;
    this.series = new Map();         // name -> {color, pts: [[t, v], ...]}
    this.canvas.dataset.points = "0";
  }

  push(name, t, v) {
    if (v === null || v === undefined || Number.isNaN(v)) return;
    let s = this.series.get(name);
    if (!s) {
      s = { color: PALETTE[this.series.size % PALETTE.length], pts: [] };
      this.series.set(name, s);
    }
    s.pts.push([t, v / this.scale]);
    if (s.pts.length > this.maxPoints) s.pts.shift();
  }

  clear() { this.series.clear(); }

  draw() {
    const c = this.canvas, g = c.getContext("2d");
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    if (c.width !== w * dpr || c.height !== h * dpr) { c.width = w * dpr; c.height = h * dpr; }
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    let t0 = Infinity, t1 = -Infinity, v1 = 0, n = 0;
    for (const s of this.series.values()) {
      for (const [t, v] of s.pts) {
        t0 = Math.min(t0, t); t1 = Math.max(t1, t); v1 = Math.max(v1, v); n++;
      }
    }
    c.dataset.points = String(n);
    // Legend columns as the longest name allows.
    let longest = 0;
    for (const name of this.series.keys()) longest = Math.max(longest, name.length);
    const cols = Math.max(1, Math.min(3, Math.floor((w - 56) / (longest * 6.5 + 24))));
    const L = 56, R = 8, T = 8, B = 22 + 14 * Math.ceil(this.series.size / cols);
    g.font = "11px sans-serif";
    g.fillStyle = "#666";
    if (n === 0) { g.fillText("no data yet", L, T + 14); return; }
    if (t1 === t0) t1 = t0 + 1000;
    const top = niceCeil(v1 || 1);
    const x = t => L + (t - t0) / (t1 - t0) * (w - L - R);
    const y = v => T + (1 - v / top) * (h - T - B);
    // Axes and grid.
    g.strokeStyle = "#ddd"; g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const v = top * i / 4, yy = y(v);
      g.beginPath(); g.moveTo(L, yy); g.lineTo(w - R, yy); g.stroke();
      g.fillText(fmt(v) + (i === 4 ? " " + this.unit : ""), 2, yy + 4);
    }
    const secs = (t1 - t0) / 1000;
    g.fillText("-" + Math.round(secs) + " s", L, h - B + 14);
    g.fillText("now", w - R - 22, h - B + 14);
    // Lines (or bars).
    for (const s of this.series.values()) {
      g.strokeStyle = s.color; g.fillStyle = s.color; g.lineWidth = 1.5;
      if (this.bars) {
        for (const [t, v] of s.pts) g.fillRect(x(t) - 1, y(v), 2, y(0) - y(v));
        continue;
      }
      g.beginPath();
      s.pts.forEach(([t, v], i) => (i ? g.lineTo(x(t), y(v)) : g.moveTo(x(t), y(v))));
      g.stroke();
      if (s.pts.length === 1) g.fillRect(x(s.pts[0][0]) - 2, y(s.pts[0][1]) - 2, 4, 4);
    }
    // Legend.
    let i = 0;
    for (const [name, s] of this.series) {
      const lx = L + (i % cols) * ((w - L) / cols), ly = h - B + 28 + 14 * Math.floor(i / cols);
      g.fillStyle = s.color; g.fillRect(lx, ly - 8, 10, 3);
      g.fillStyle = "#333"; g.fillText(name, lx + 14, ly - 3);
      i++;
    }
  }
}

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmt(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(2);
}
