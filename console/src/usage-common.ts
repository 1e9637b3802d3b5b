// What the usage views share: the shape of a usage row and its cells.
import { h, money } from "./dom";

export interface Usage {
  sandbox_id?: string;
  day?: string;
  cpu_s: number;
  memory_gib_s: number;
  storage_gib_h: number;
  egress_bytes: number;
  cost_usd: number;
}

export function egress(n: number): string {
  return n < 1e6 ? (n / 1e3).toFixed(1) + " kB" : (n / 1e9).toFixed(3) + " GB";
}

/** usageCells are a row's figures, labelled for the narrow layout. */
export function usageCells(u: Usage): HTMLTableCellElement[] {
  return [
    h("td", { class: "num", "data-label": "CPU" }, (u.cpu_s / 3600).toFixed(3) + " vCPU-h"),
    h("td", { class: "num", "data-label": "Memory" }, (u.memory_gib_s / 3600).toFixed(3) + " GiB-h"),
    h("td", { class: "num", "data-label": "Storage" }, u.storage_gib_h.toFixed(3) + " GiB-h"),
    h("td", { class: "num", "data-label": "Egress" }, egress(u.egress_bytes)),
    h("td", { class: "num", "data-label": "Cost" }, money(u.cost_usd)),
  ];
}

export const usageHeads = ["CPU", "Memory", "Storage", "Egress", "Cost"];

/** spendBar shows cost against a limit: a meter and the share as text. */
export function spendBar(id: string, cost: number, limit: number | null | undefined): HTMLElement {
  if (limit == null) return h("p", { id, class: "muted" }, `${money(cost)} spent, no spend limit`);
  const pct = limit > 0 ? Math.min(100, (cost / limit) * 100) : 100;
  const m = h("meter", { min: "0", max: "100", low: "50", high: "80", optimum: "0", value: pct.toFixed(1), "aria-label": "share of the spend limit" });
  return h("p", { id, class: "spend" }, m, ` ${money(cost)} of ${money(limit)} (${pct.toFixed(1)}%)`);
}
