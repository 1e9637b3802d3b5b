// The list page: the team's sandboxes, live (the event stream refreshes
// it), filtered by state and label, a search box that opens one by ID or
// name, and New → Run code.
import type { SandboxInfo } from "@cove-dev/sdk";
import { events, sdk } from "./api";
import { debounce, h, message, money } from "./dom";
import { app, navigate, onLeave } from "./router";
import { admitted, loadTeam, team, topBar } from "./team";

const STATES = ["", "running", "creating", "sleeping", "asleep", "waking", "terminated", "failed"];

export function sandboxURL(ref: string, tab = ""): string {
  return "/sandboxes/" + encodeURIComponent(ref) + (tab ? "/" + tab : "");
}

async function createAndOpen(btn: HTMLButtonElement, err: HTMLElement) {
  btn.disabled = true;
  btn.textContent = "Creating…";
  err.textContent = "";
  try {
    const sb = await sdk().create({}, { wait: false });
    navigate(sandboxURL(sb.id));
  } catch (x) {
    err.textContent = "Could not create a sandbox: " + message(x);
    btn.disabled = false;
    btn.textContent = "New → Run code";
  }
}

/** readiness says why New → Run code cannot create now, or "" when it
 * can: the team needs the managed_environment admission (an admin team
 * has every flag) and the default template must be ready. */
async function readiness(): Promise<{ why: string; retry: boolean }> {
  const me = team() ?? (await loadTeam());
  if (!me.admin && me.admitted && !admitted("managed_environment"))
    return {
      why: `Your team (${me.team.name}) is not admitted to the managed environment. Ask an admin to run: cove teams admit ${me.team.name} --managed-environment`,
      retry: false,
    };
  const tpls = await sdk().templates();
  const t = tpls.find((x) => x.kind === "managed") ?? tpls[0];
  if (!t) return { why: "No template is available to this team. Ask an admin to set up a template.", retry: false };
  if (t.status === "building")
    return { why: `The ${t.name} template is building${t.progress ? ": " + t.progress : ""}. Try again shortly.`, retry: true };
  if (t.status === "failed")
    return { why: `The ${t.name} template failed to build${t.reason ? ": " + t.reason : ""}. Ask an admin to look at cove serve's log.`, retry: false };
  return { why: "", retry: false };
}

/** labelFilter parses "k=v, k2=v2" into a label selector. */
function labelFilter(s: string): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  for (const part of s.split(",")) {
    const [k, ...v] = part.split("=");
    if (k.trim()) out[k.trim()] = v.join("=").trim();
  }
  return Object.keys(out).length ? out : undefined;
}

export function listPage() {
  const filter = h("select", { id: "state-filter", "aria-label": "state" }, ...STATES.map((s) => h("option", { value: s }, s || "all states")));
  const labels = h("input", { id: "label-filter", type: "search", placeholder: "label=value", "aria-label": "labels", autocomplete: "off" });
  const search = h("input", { id: "search", type: "search", placeholder: "Open a sandbox by ID or name", "aria-label": "open a sandbox", autocomplete: "off" });
  const err = h("p", { class: "error", id: "list-error", role: "alert" });
  const newBtn = h("button", { id: "new", class: "primary", "aria-describedby": "new-reason" }, "New → Run code");
  const reason = h("p", { id: "new-reason", class: "muted reason", role: "status" });
  newBtn.addEventListener("click", () => createAndOpen(newBtn, err));
  let retry: number | undefined;
  const check = async () => {
    try {
      const r = await readiness();
      reason.textContent = r.why;
      newBtn.disabled = !!r.why;
      newBtn.dataset.ready = r.why ? "0" : "1";
      if (r.retry) retry = window.setTimeout(check, 10000);
    } catch (x) {
      // Creating may still work: say what failed, keep the button.
      reason.textContent = "Could not check the template: " + message(x);
      newBtn.dataset.ready = "1";
    }
  };
  onLeave(() => clearTimeout(retry));
  const rows = h("tbody", { id: "sandboxes" });
  const searchForm = h("form", { id: "open", class: "open" }, search);
  searchForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const ref = search.value.trim();
    if (ref) navigate(sandboxURL(ref));
  });
  app.append(
    topBar(),
    h(
      "main",
      {},
      h("div", { class: "toolbar" }, searchForm, filter, labels, newBtn),
      reason,
      err,
      h(
        "table",
        { class: "list" },
        h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "State"), h("th", { class: "wide" }, "Template"), h("th", { class: "num" }, "Cost"))),
        rows,
      ),
    ),
  );
  let gen = 0;
  const load = async () => {
    const my = ++gen;
    try {
      const r = await sdk().listPage({ limit: 200, state: filter.value || undefined, labels: labelFilter(labels.value) });
      if (my !== gen) return;
      let items: SandboxInfo[] = r.items ?? [];
      if (filter.value) items = items.filter((s) => s.state === filter.value);
      err.textContent = "";
      rows.replaceChildren(
        ...items.map((s) =>
          h(
            "tr",
            { class: "row", "data-id": s.id, onclick: () => navigate(sandboxURL(s.id)) },
            h("td", {}, h("a", { href: sandboxURL(s.id), onclick: (e: Event) => e.preventDefault() }, s.name || s.id), h("div", { class: "muted mono" }, s.id)),
            h("td", {}, h("span", { class: "state s-" + s.state }, s.state)),
            h("td", { class: "wide" }, s.template),
            h("td", { class: "num" }, money(s.costUsd)),
          ),
        ),
      );
      if (!items.length) rows.append(h("tr", {}, h("td", { colspan: "4", class: "muted" }, "No sandboxes.")));
    } catch (x) {
      err.textContent = message(x);
    }
  };
  filter.addEventListener("change", load);
  labels.addEventListener("change", load);
  load();
  check();
  const refresh = debounce(load, 300);
  onLeave(events(() => refresh()));
  search.focus();
}
