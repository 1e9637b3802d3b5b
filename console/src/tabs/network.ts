// The network tab: the sandbox's policy and what its traffic met, allowed
// and denied destinations with counts and bytes (GET …/network, stored
// observations). "Allow" on a denied row adds destination:port to the
// policy's allow list (PATCH the sandbox) and shows the result.
// Destinations are what the sandbox asked for: shown as text only.
import { api, sdk } from "../api";
import { h, message } from "../dom";
import type { Tab, TabContext } from "../tab";

interface Observation {
  destination: string;
  port: number;
  decision: string;
  reason?: string;
  count: number;
  bytes_out: number;
  bytes_in: number;
  last_seen: string;
  last_command_id?: string;
  injected?: number;
  last_status?: number;
}
interface InjectRule {
  host: string;
  port?: number;
  path_prefix?: string;
  header: string;
  value: string;
}
interface NetworkView {
  policy: { allow: string[] | null; setup_allow?: string[] | null; inject?: InjectRule[] | null };
  observations: Observation[] | null;
}

export function bytes(n: number): string {
  if (n < 1024) return n + " B";
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
  if (n < 1024 ** 3) return (n / 1024 / 1024).toFixed(1) + " MiB";
  return (n / 1024 ** 3).toFixed(2) + " GiB";
}

/** allowEntry is the allow-list entry for an observation: host:port, an
 * IPv6 address in brackets. */
function allowEntry(o: Observation): string {
  const d = o.destination.includes(":") && !o.destination.startsWith("[") ? `[${o.destination}]` : o.destination;
  return o.port ? `${d}:${o.port}` : d;
}

const tab: Tab = {
  id: "network",
  label: "Network",
  mount(ctx: TabContext) {
    const policy = h("span", { id: "net-policy", class: "mono" });
    // The injection rules as given: they name secrets, never hold a value.
    const inject = h("p", { id: "net-inject", class: "mono muted" });
    const result = h("p", { id: "net-result", role: "status", class: "muted" });
    const err = h("p", { class: "error", id: "net-error", role: "alert" });
    const rows = h("tbody", { id: "net-rows" });
    const reload = h("button", { id: "net-reload" }, "Refresh");
    ctx.el.append(
      h("div", { class: "termbar" }, h("span", {}, "Allowed: ", policy), reload),
      inject,
      result,
      err,
      h(
        "table",
        { class: "list stack" },
        h(
          "thead",
          {},
          h("tr", {}, h("th", {}, "Destination"), h("th", {}, "Decision"), h("th", { class: "num" }, "Count"), h("th", { class: "num" }, "Out"), h("th", { class: "num" }, "In"), h("th", {}, "Last seen"), h("th", {}, "")),
        ),
        rows,
      ),
    );
    let allow: string[] = [];
    const allowIt = async (o: Observation, b: HTMLButtonElement) => {
      const entry = allowEntry(o);
      b.disabled = true;
      result.textContent = "";
      err.textContent = "";
      try {
        const sb = await sdk().get(ctx.sandbox().id);
        const cur: string[] = (sb.info.network?.allow as string[] | undefined) ?? allow;
        const info = await sb.update({ network: { allow: cur.includes(entry) ? cur : [...cur, entry] } });
        result.textContent = `Allowed ${entry}: the policy is now ${((info.network?.allow as string[]) ?? []).join(", ")}`;
        await ctx.refresh();
        await load();
      } catch (x) {
        err.textContent = `Could not allow ${entry}: ${message(x)}`;
        b.disabled = false;
      }
    };
    const load = async () => {
      try {
        const v = await api<NetworkView>("GET", "/v1/sandboxes/" + encodeURIComponent(ctx.sandbox().id) + "/network");
        err.textContent = "";
        allow = v.policy?.allow ?? [];
        policy.textContent = allow.length ? allow.join(", ") : "nothing (all outbound traffic is denied)";
        const rules = v.policy?.inject ?? [];
        inject.textContent = rules.length
          ? "Injected: " + rules.map((r) => `${r.host}${r.port ? ":" + r.port : ""}${r.path_prefix ?? ""} ${r.header}: ${r.value}`).join("; ")
          : "";
        const obs = [...(v.observations ?? [])].sort((a, b) => (a.decision === b.decision ? b.last_seen.localeCompare(a.last_seen) : a.decision === "denied" ? -1 : 1));
        rows.replaceChildren(
          ...obs.map((o) => {
            const entry = allowEntry(o);
            const canAllow = o.decision === "denied" && !o.reason && o.destination !== "other" && !allow.includes(entry);
            const b = h("button", { class: "allow", "data-dest": entry, "aria-label": "allow " + entry }, "Allow");
            b.addEventListener("click", () => allowIt(o, b));
            return h(
              "tr",
              { class: "obs " + o.decision, "data-dest": entry, "data-decision": o.decision },
              h("td", { class: "mono", "data-label": "Destination" }, entry),
              h("td", { "data-label": "Decision" }, h("span", { class: "state s-" + (o.decision === "allowed" ? "running" : "failed") }, o.reason ? `${o.decision} (${o.reason})` : o.decision)),
              h("td", { class: "num", "data-label": "Count" }, o.injected || o.last_status ? `${o.count} (${o.injected ?? 0} injected, last ${o.last_status})` : String(o.count)),
              h("td", { class: "num", "data-label": "Out" }, bytes(o.bytes_out)),
              h("td", { class: "num", "data-label": "In" }, bytes(o.bytes_in)),
              h("td", { "data-label": "Last seen" }, new Date(o.last_seen).toLocaleString()),
              h("td", {}, canAllow ? b : null),
            );
          }),
        );
        if (!obs.length) rows.append(h("tr", {}, h("td", { colspan: "7", class: "muted" }, "No traffic seen yet.")));
      } catch (x) {
        err.textContent = message(x);
      }
    };
    reload.addEventListener("click", load);
    // New denials come as events; the header refreshes the sandbox on each.
    let t: number | undefined;
    ctx.onChange(() => {
      if (ctx.el.hidden) return;
      clearTimeout(t);
      t = window.setTimeout(load, 500);
    });
    return { show: load, close: () => clearTimeout(t) };
  },
};

export default tab;
