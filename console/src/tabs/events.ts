// The events tab: the sandbox's events as they happen (the team's stream,
// filtered to this sandbox), newest at the top. Every field is shown as
// text: event data can hold what a sandbox chose (a destination name, a
// command), and it never becomes markup.
import { sdk } from "../api";
import type { Event } from "@cove-dev/sdk";
import { h, message } from "../dom";
import type { Tab, TabContext } from "../tab";

const MAX_ROWS = 500;

/** fields flattens an event's data to "key=value" strings. */
function fields(data: unknown, prefix = ""): string[] {
  if (data == null || typeof data !== "object") return prefix ? [`${prefix}=${String(data)}`] : [];
  const out: string[] = [];
  for (const [k, v] of Object.entries(data as Record<string, unknown>)) {
    const key = prefix ? prefix + "." + k : k;
    if (v != null && typeof v === "object" && !Array.isArray(v)) out.push(...fields(v, key));
    else out.push(`${key}=${Array.isArray(v) ? JSON.stringify(v) : String(v)}`);
  }
  return out;
}

const tab: Tab = {
  id: "events",
  label: "Events",
  mount(ctx: TabContext) {
    const list = h("ol", { id: "events", class: "timeline", "aria-live": "polite" });
    const empty = h("p", { class: "muted", id: "events-empty" }, "Waiting for events…");
    ctx.el.append(empty, list);
    const err = h("p", { class: "error", id: "events-error", role: "alert" });
    ctx.el.prepend(err);
    const seen = new Set<string>();
    const add = (e: Event) => {
      if (e.id) {
        if (seen.has(e.id)) return;
        seen.add(e.id);
      }
      empty.remove();
      const t = e.time ? new Date(e.time) : new Date();
      const row = h(
        "li",
        { class: "event", "data-type": e.type },
        h("time", { datetime: t.toISOString(), class: "mono muted" }, t.toLocaleTimeString()),
        h("span", { class: "etype" }, e.type),
        h("span", { class: "mono efields" }, fields(e.data).join("  ")),
      );
      list.prepend(row);
      while (list.children.length > MAX_ROWS) list.lastElementChild!.remove();
    };
    const ctl = new AbortController();
    const id = ctx.sandbox().id;
    (async () => {
      // What happened so far (oldest first), then the stream from there.
      let after = "";
      try {
        let cursor = "";
        do {
          const r = await sdk().call<{ items: Event[] | null; nextCursor?: string }>({
            method: "GET", path: "/v1/events", params: { sandbox: id, limit: 200, cursor },
          });
          for (const e of r.items ?? []) {
            add(e);
            after = e.id || after;
          }
          cursor = r.nextCursor ?? "";
        } while (cursor && !ctl.signal.aborted);
      } catch (x) {
        err.textContent = message(x);
      }
      while (!ctl.signal.aborted) {
        try {
          for await (const e of sdk().streamEvents({ sandbox: id, after: after || undefined, signal: ctl.signal })) {
            after = e.id || after;
            err.textContent = "";
            add(e);
          }
        } catch (x) {
          if (ctl.signal.aborted) return;
          err.textContent = message(x);
        }
        await new Promise((r) => setTimeout(r, 2000));
      }
    })();
    const stop = () => ctl.abort();
    return { close: stop };
  },
};

export default tab;
