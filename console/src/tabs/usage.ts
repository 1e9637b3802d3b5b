// The usage tab: what the sandbox used over its life and what it cost
// (GET …/usage), its prices, spend limit and budget alerts.
import { api } from "../api";
import { h, message, money } from "../dom";
import type { Tab, TabContext } from "../tab";
import { spendBar, usageCells, usageHeads, type Usage } from "../usage-common";

interface SandboxUsage extends Usage {
  spend_limit_usd: number | null;
  price_per_hour_usd: { running: number; asleep: number };
}

const tab: Tab = {
  id: "usage",
  label: "Usage",
  mount(ctx: TabContext) {
    const err = h("p", { class: "error", id: "usage-error", role: "alert" });
    const body = h("div", { id: "sb-usage" });
    ctx.el.append(err, body);
    const load = async () => {
      try {
        const u = await api<SandboxUsage>("GET", "/v1/sandboxes/" + encodeURIComponent(ctx.sandbox().id) + "/usage");
        err.textContent = "";
        const sb = ctx.sandbox();
        const alerts: number[] = sb.budgetAlerts ?? [];
        body.replaceChildren(
          spendBar("sb-spend", u.cost_usd, u.spend_limit_usd),
          h(
            "dl",
            { class: "facts" },
            h("dt", {}, "Price running"),
            h("dd", {}, money(u.price_per_hour_usd?.running) + " an hour (egress extra)"),
            h("dt", {}, "Price asleep"),
            h("dd", {}, "at most " + money(u.price_per_hour_usd?.asleep) + " an hour"),
            h("dt", {}, "Budget alerts"),
            h("dd", {}, u.spend_limit_usd == null ? "none (no spend limit)" : alerts.length ? alerts.map((a) => a + "%").join(", ") : "none"),
            h("dt", {}, "At the limit"),
            h("dd", {}, sb.onBudget ?? "sleep"),
          ),
          h(
            "table",
            { class: "list stack" },
            h("thead", {}, h("tr", {}, ...usageHeads.map((x) => h("th", { class: "num" }, x)))),
            h("tbody", {}, h("tr", { id: "sb-usage-row" }, ...usageCells(u))),
          ),
        );
      } catch (x) {
        err.textContent = message(x);
      }
    };
    // The header refreshes the sandbox on every event; cost follows.
    ctx.onChange(() => {
      if (!ctx.el.hidden) load();
    });
    return { show: load, close: () => {} };
  },
};

export default tab;
