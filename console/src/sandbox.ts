// A sandbox's page: the header (state, resources, cost, spend limit, and
// sleep / wake / terminate) and its tabs (see tabs.ts). Deep links:
// /sandboxes/<id or name>[/<tab>].
import type { Sandbox, SandboxInfo } from "@cove-dev/sdk";
import { events, sandboxOf, sdk, status } from "./api";
import { debounce, h, message, money } from "./dom";
import { sandboxURL } from "./list";
import { app, onLeave, replace } from "./router";
import type { TabContext, TabView } from "./tab";
import { TABS } from "./tabs";
import { topBar } from "./team";

const TRANSITIONAL = new Set(["creating", "setting_up", "sleeping", "waking", "terminating"]);

/** volumeFacts is the Volumes line of the header: each volume the
 * sandbox mounts, where, and whether read-only; none when it mounts none. */
function volumeFacts(sb: SandboxInfo): [string, string][] {
  const vols = (sb as { volumes?: { name: string; path: string; readOnly?: boolean }[] }).volumes ?? [];
  if (!vols.length) return [];
  return [["Volumes", vols.map((v) => `${v.name} at ${v.path}${v.readOnly ? " (read-only)" : ""}`).join(", ")]];
}

export function sandboxPage(ref: string, tabID: string) {
  const title = h("h1", { id: "sb-name" }, ref);
  const state = h("span", { id: "sb-state", class: "state" }, "…");
  const facts = h("dl", { class: "facts", id: "sb-facts" });
  const err = h("p", { class: "error", id: "sb-error", role: "alert" });
  const btn = (id: string, label: string) => h("button", { id }, label);
  const sleepB = btn("sleep", "Sleep");
  const wakeB = btn("wake", "Wake");
  const termB = btn("terminate", "Terminate");
  termB.classList.add("danger");
  const tabBar = h("nav", { class: "tabs", role: "tablist", id: "tabs" });
  const panes = h("div", { class: "panes" });
  app.append(
    topBar(),
    h(
      "main",
      {},
      h("div", { class: "sbhead" }, h("div", {}, title, state), h("div", { class: "actions" }, sleepB, wakeB, termB)),
      facts,
      err,
      tabBar,
      panes,
    ),
  );
  let sb: SandboxInfo | null = null;
  let busy = "";
  const listeners: ((sb: SandboxInfo) => void)[] = [];
  const views = new Map<string, TabView>();
  const paneOf = new Map<string, HTMLElement>();
  const buttons = new Map<string, HTMLButtonElement>();

  const render = () => {
    if (!sb) return;
    title.textContent = sb.name || sb.id;
    // An action in flight, then the server's transitional state, show as
    // "sleeping…" until the state it leads to is reached.
    const moving = TRANSITIONAL.has(sb.state);
    state.textContent = busy || (moving ? sb.state + "…" : sb.state);
    state.className = "state s-" + (busy || moving ? "busy" : sb.state);
    state.setAttribute("aria-busy", String(!!busy || moving));
    const r = sb.resources ?? {};
    facts.replaceChildren(
      ...([
        ["ID", sb.id],
        ["Template", sb.template],
        ["Resources", `${r.cpus ?? "?"} CPU · ${r.memoryMib ?? "?"} MiB · ${r.diskMib ?? "?"} MiB disk`],
        ["Cost", money(sb.costUsd) + (sb.pricePerHourUsd?.running != null ? ` (${money(sb.pricePerHourUsd.running)}/h running)` : "")],
        ["Spend limit", money(sb.spendLimitUsd)],
        ...volumeFacts(sb),
      ] as [string, string][]).flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-fact": k.toLowerCase().replace(/ /g, "-") }, v)]),
    );
    const s = sb.state;
    sleepB.disabled = !!busy || s !== "running";
    wakeB.disabled = !!busy || !(s === "sleeping" || s === "asleep");
    termB.disabled = !!busy || s === "terminated" || s === "terminating";
  };
  const load = async () => {
    try {
      sb = (await sdk().get(ref)).info;
      err.textContent = "";
      render();
      if (!views.size) select(tabID);
      for (const f of listeners) f(sb);
      if (TRANSITIONAL.has(sb.state)) follow(sb.id, sb.state);
    } catch (x) {
      err.textContent = message(x);
      if (status(x) === 404) state.textContent = "not found";
    }
  };
  // follow waits (long poll) for the sandbox to leave a transitional
  // state, so the state that follows shows even without an event.
  let following = "";
  const follow = (id: string, from: string) => {
    if (following === from) return;
    following = from;
    const next = from === "sleeping" ? "asleep" : from === "terminating" ? "terminated" : "running";
    let failed = false;
    sdk()
      .get(id)
      .then((s) => s.wait(next, { timeoutS: 60 }))
      .catch(() => (failed = true))
      .finally(() => {
        following = "";
        // After a failed wait, not at once: no busy loop while the API is away.
        if (!left) window.setTimeout(load, failed ? 3000 : 0);
      });
  };
  let left = false;
  onLeave(() => (left = true));
  const ctx = (el: HTMLElement): TabContext => ({
    sandbox: () => sb!,
    onChange: (f) => listeners.push(f),
    refresh: load,
    el,
  });
  const select = (id: string) => {
    const tab = TABS.find((t) => t.id === id) ?? TABS[0];
    for (const [tid, b] of buttons) {
      const on = tid === tab.id;
      b.classList.toggle("active", on);
      b.setAttribute("aria-selected", String(on));
      paneOf.get(tid)!.hidden = !on;
    }
    replace(sandboxURL(ref, tab === TABS[0] ? "" : tab.id));
    let v = views.get(tab.id);
    if (!v && sb) {
      v = tab.mount(ctx(paneOf.get(tab.id)!));
      views.set(tab.id, v);
    }
    v?.show?.();
  };
  // Arrow keys, Home and End move between tabs (the tablist pattern).
  tabBar.addEventListener("keydown", (e: KeyboardEvent) => {
    const ids = TABS.map((t) => t.id);
    const at = ids.indexOf((document.activeElement as HTMLElement | null)?.dataset?.tab ?? "");
    if (at < 0) return;
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: ids.length - 1 }[e.key];
    if (to == null) return;
    e.preventDefault();
    const id = ids[(to + ids.length) % ids.length];
    select(id);
    buttons.get(id)!.focus();
  });
  for (const t of TABS) {
    const b = h("button", { class: "tab", role: "tab", id: "tab-" + t.id, "data-tab": t.id, "aria-controls": "pane-" + t.id }, t.label);
    b.addEventListener("click", () => select(t.id));
    buttons.set(t.id, b);
    tabBar.append(b);
    const pane = h("section", { class: "pane", id: "pane-" + t.id, role: "tabpanel" });
    pane.hidden = true;
    paneOf.set(t.id, pane);
    panes.append(pane);
  }
  const act = async (label: string, f: (s: Sandbox) => Promise<unknown>) => {
    if (!sb) return;
    busy = label;
    err.textContent = "";
    render();
    try {
      await f(sandboxOf(sb));
    } catch (x) {
      err.textContent = message(x);
    }
    busy = "";
    await load();
  };
  sleepB.addEventListener("click", () => act("sleeping…", (s) => s.sleep({ wait: false })));
  wakeB.addEventListener("click", () => act("waking…", (s) => s.wake({ wait: false })));
  const dlgText = h("p", { id: "terminate-text" });
  const yes = h("button", { id: "terminate-yes", class: "danger" }, "Terminate");
  const no = h("button", { id: "terminate-no" }, "Cancel");
  const dlg = h(
    "dialog",
    { id: "terminate-dialog", "aria-labelledby": "terminate-title", "aria-describedby": "terminate-text" },
    h("h2", { id: "terminate-title" }, "Terminate this sandbox?"),
    dlgText,
    h("div", { class: "actions" }, no, yes),
  );
  yes.addEventListener("click", () => dlg.close("yes"));
  no.addEventListener("click", () => dlg.close("no"));
  app.append(dlg);
  dlg.addEventListener("close", () => {
    if (dlg.returnValue === "yes") act("terminating…", (s) => s.terminate());
    termB.focus();
  });
  termB.addEventListener("click", () => {
    dlgText.textContent = `${sb?.name || ref} and its files and processes are gone for good.`;
    dlg.returnValue = "";
    dlg.showModal();
    no.focus();
  });
  load();
  const refresh = debounce(load, 300);
  onLeave(events(() => refresh()));
  // Cost accrues without events (the meter runs every metrics interval):
  // read it again now and then while the sandbox runs and the page shows.
  const tick = window.setInterval(() => {
    if (sb?.state === "running" && document.visibilityState === "visible" && !busy) load();
  }, 15000);
  onLeave(() => clearInterval(tick));
  onLeave(() => {
    for (const v of views.values()) v.close();
  });
}
