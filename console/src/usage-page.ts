// The team's usage page (/usage): this month's spend against the team's
// limit and the usage by sandbox (GET /v1/usage?group_by=sandbox).
import { api } from "./api";
import { h, message } from "./dom";
import { sandboxURL } from "./list";
import { app, navigate } from "./router";
import { team, topBar } from "./team";
import { spendBar, usageCells, usageHeads, type Usage } from "./usage-common";

interface Report {
  from: string;
  to: string;
  items: Usage[] | null;
  total: Usage;
  month_cost_usd: number;
  spend_limit_usd: number | null;
}

export function usagePage() {
  const err = h("p", { class: "error", id: "usage-error", role: "alert" });
  const head = h("div", { id: "team-spend" });
  const rows = h("tbody", { id: "usage-rows" });
  const foot = h("tfoot", {});
  const span = h("p", { class: "muted", id: "usage-span" });
  app.append(
    topBar(),
    h(
      "main",
      {},
      h("h1", { class: "pagetitle" }, "Usage"),
      head,
      span,
      err,
      h(
        "table",
        { class: "list stack" },
        h("thead", {}, h("tr", {}, h("th", {}, "Sandbox"), ...usageHeads.map((x) => h("th", { class: "num" }, x)))),
        rows,
        foot,
      ),
    ),
  );
  (async () => {
    try {
      const r = await api<Report>("GET", "/v1/usage?group_by=sandbox");
      const alerts: number[] | undefined = (team()?.team as { budget_alerts?: number[] } | undefined)?.budget_alerts;
      head.replaceChildren(h("h2", {}, "This month"), spendBar("month-spend", r.month_cost_usd, r.spend_limit_usd));
      if (r.spend_limit_usd != null && alerts?.length)
        head.append(h("p", { class: "muted", id: "team-alerts" }, "Budget alerts at " + alerts.map((a) => a + "%").join(", ") + " of the monthly limit."));
      span.textContent = `By sandbox, ${new Date(r.from).toLocaleString()} – ${new Date(r.to).toLocaleString()}`;
      const items = [...(r.items ?? [])].sort((a, b) => b.cost_usd - a.cost_usd);
      rows.replaceChildren(
        ...items.map((u) => {
          const id = u.sandbox_id ?? "";
          // An ended workload's usage is keyed by its ID; it has no sandbox page.
          if (id.startsWith("wl_"))
            return h("tr", { class: "row", "data-id": id }, h("td", { class: "mono", "data-label": "Sandbox" }, id + " (workload)"), ...usageCells(u));
          return h(
            "tr",
            { class: "row", "data-id": id, onclick: () => navigate(sandboxURL(id, "usage")) },
            h("td", { class: "mono", "data-label": "Sandbox" }, h("a", { href: sandboxURL(id, "usage"), onclick: (e: Event) => e.preventDefault() }, id)),
            ...usageCells(u),
          );
        }),
      );
      if (!items.length) rows.append(h("tr", {}, h("td", { colspan: "6", class: "muted" }, "No usage in this period.")));
      foot.replaceChildren(h("tr", { id: "usage-total" }, h("td", { "data-label": "Sandbox" }, "Total"), ...usageCells(r.total)));
    } catch (x) {
      err.textContent = message(x);
    }
  })();
}
