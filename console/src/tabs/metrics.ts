// The metrics tab: CPU, memory, disk and network of the sandbox over a
// chosen range, drawn with uPlot from GET /v1/sandboxes/{id}/metrics and
// read again every few seconds while the tab is shown. Charts have fixed
// heights, so nothing moves when data arrives. The chart box carries what
// was loaded (data-samples, data-first, data-last, data-from, data-to).
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { api } from "../api";
import { h, message } from "../dom";
import type { Tab, TabContext } from "../tab";

interface Sample {
  time: string;
  cpu_millicores: number;
  memory_bytes: number;
  disk_bytes: number;
  net_in_bytes: number;
  net_out_bytes: number;
}
interface Metrics {
  from: string;
  to: string;
  step_s: number;
  samples: Sample[] | null;
  gaps: { from: string; to: string; reason: string }[] | null;
}

const RANGES: [string, number][] = [
  ["15 min", 15 * 60],
  ["1 hour", 3600],
  ["6 hours", 6 * 3600],
  ["24 hours", 24 * 3600],
];
const REFRESH_MS = 5000;
const HEIGHT = 160;
const MiB = 1024 * 1024;

interface Chart {
  id: string;
  title: string;
  series: { label: string; stroke: string; pick: (s: Sample) => number }[];
  unit: string;
}

const CHARTS: Chart[] = [
  { id: "cpu", title: "CPU", unit: "CPUs", series: [{ label: "CPUs", stroke: "#4f8cff", pick: (s) => s.cpu_millicores / 1000 }] },
  { id: "memory", title: "Memory", unit: "MiB", series: [{ label: "MiB", stroke: "#3ecf8e", pick: (s) => s.memory_bytes / MiB }] },
  { id: "disk", title: "Disk", unit: "MiB", series: [{ label: "MiB", stroke: "#f5b041", pick: (s) => s.disk_bytes / MiB }] },
  {
    id: "network",
    title: "Network",
    unit: "KiB per sample",
    series: [
      { label: "in KiB", stroke: "#4f8cff", pick: (s) => s.net_in_bytes / 1024 },
      { label: "out KiB", stroke: "#ff6b6b", pick: (s) => s.net_out_bytes / 1024 },
    ],
  },
];

const tab: Tab = {
  id: "metrics",
  label: "Metrics",
  mount(ctx: TabContext) {
    const range = h("select", { id: "metrics-range", "aria-label": "range" }, ...RANGES.map(([l, s]) => h("option", { value: String(s) }, l)));
    const status = h("span", { id: "metrics-status", class: "muted" });
    const err = h("p", { class: "error", id: "metrics-error", role: "alert" });
    const box = h("div", { id: "metrics", class: "charts", "data-samples": "0" });
    const gaps = h("ul", { id: "metrics-gaps", class: "muted gaps" });
    ctx.el.append(h("div", { class: "termbar" }, h("label", {}, "Range ", range), status), err, box, gaps);

    const plots = new Map<string, uPlot>();
    const holders = new Map<string, HTMLElement>();
    for (const c of CHARTS) {
      const holder = h("div", { class: "chart", id: "chart-" + c.id });
      holders.set(c.id, holder);
      box.append(h("figure", { class: "chartbox" }, h("figcaption", {}, c.title + " ", h("span", { class: "muted" }, c.unit)), holder));
    }
    const width = () => Math.max(240, Math.floor((box.clientWidth || 600) / (box.clientWidth > 800 ? 2 : 1)) - 24);
    const draw = (m: Metrics) => {
      const samples = m.samples ?? [];
      const xs = samples.map((s) => Date.parse(s.time) / 1000);
      for (const c of CHARTS) {
        const data: uPlot.AlignedData = [xs, ...c.series.map((se) => samples.map(se.pick))];
        let p = plots.get(c.id);
        if (!p) {
          p = new uPlot(
            {
              width: width(),
              height: HEIGHT,
              legend: { show: c.series.length > 1 },
              scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
              axes: [
                { stroke: "#8a93a3", grid: { stroke: "#2a2f3a" }, ticks: { stroke: "#2a2f3a" } },
                { stroke: "#8a93a3", grid: { stroke: "#2a2f3a" }, ticks: { stroke: "#2a2f3a" }, size: 56 },
              ],
              series: [{}, ...c.series.map((se) => ({ label: se.label, stroke: se.stroke, width: 1.5, fill: se.stroke + "22" }))],
            },
            data,
            holders.get(c.id)!,
          );
          plots.set(c.id, p);
        } else p.setData(data);
      }
      box.dataset.samples = String(samples.length);
      box.dataset.first = samples.length ? samples[0].time : "";
      box.dataset.last = samples.length ? samples[samples.length - 1].time : "";
      gaps.replaceChildren(
        ...(m.gaps ?? []).map((g) =>
          h("li", {}, `${new Date(g.from).toLocaleTimeString()} – ${new Date(g.to).toLocaleTimeString()}: ${g.reason}`),
        ),
      );
      status.textContent = samples.length
        ? `${samples.length} samples, every ${m.step_s} s`
        : "No samples in this range yet (the node samples running sandboxes only).";
    };
    let gen = 0;
    const load = async () => {
      const my = ++gen;
      const to = new Date();
      const from = new Date(to.getTime() - Number(range.value) * 1000);
      const q = `?from=${encodeURIComponent(from.toISOString())}&to=${encodeURIComponent(to.toISOString())}`;
      try {
        const m = await api<Metrics>("GET", "/v1/sandboxes/" + encodeURIComponent(ctx.sandbox().id) + "/metrics" + q);
        if (my !== gen) return;
        err.textContent = "";
        box.dataset.from = from.toISOString();
        box.dataset.to = to.toISOString();
        draw(m);
      } catch (x) {
        if (my === gen) err.textContent = message(x);
      }
    };
    range.addEventListener("change", load);
    const timer = window.setInterval(() => {
      if (!ctx.el.hidden && document.visibilityState === "visible") load();
    }, REFRESH_MS);
    const resize = () => {
      if (ctx.el.hidden) return;
      for (const p of plots.values()) p.setSize({ width: width(), height: HEIGHT });
    };
    window.addEventListener("resize", resize);
    return {
      show: () => {
        resize();
        load();
      },
      close: () => {
        clearInterval(timer);
        window.removeEventListener("resize", resize);
        for (const p of plots.values()) p.destroy();
      },
    };
  },
};

export default tab;
