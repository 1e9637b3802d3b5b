// The commands tab: the sandbox's commands, newest first, with their state
// and exit code, refreshed on the sandbox's events. Opening one replays its
// recorded output and follows it while it runs; output is text only.
import type { CommandInfo } from "@cove-dev/sdk";
import { events, sandboxOf, sdk, status } from "../api";
import { debounce, h, message } from "../dom";
import type { Tab, TabContext } from "../tab";
import "../commands.css";

const tab: Tab = {
  id: "commands",
  label: "Commands",
  mount(ctx: TabContext) {
    const sid = ctx.sandbox().id;
    const body = h("tbody", { id: "cmd-rows" });
    const err = h("p", { class: "error", role: "alert" });
    const table = h(
      "table",
      {},
      h("thead", {}, h("tr", {}, h("th", {}, "Command"), h("th", {}, "State"), h("th", { class: "num" }, "Exit"), h("th", { class: "wide" }, "Started"))),
      body,
    );
    const title = h("div", { class: "mono", id: "cmd-title" }, "Open a command to see its output.");
    const state = h("span", { class: "muted", id: "cmd-state", role: "status" });
    const out = h("pre", { id: "cmd-output", tabindex: "0", "aria-label": "Output" });
    ctx.el.append(
      h("div", { class: "cmds", id: "commands" }, h("div", { class: "cmdlist" }, err, table), h("div", { class: "cmdout" }, title, state, out)),
    );

    let selected = "";
    let follow: AbortController | null = null;

    const load = async () => {
      try {
        const sb = sandboxOf(ctx.sandbox());
        const items: CommandInfo[] = [];
        let cursor = "";
        do {
          const p = await sb.commands({ limit: 200, cursor: cursor || undefined });
          items.push(...p.items);
          cursor = p.nextCursor;
        } while (cursor && items.length < 1000);
        items.sort((a, b) => (b.startedAt ?? "").localeCompare(a.startedAt ?? "") || b.id.localeCompare(a.id));
        body.replaceChildren(...items.map(row));
        if (!items.length) body.append(h("tr", {}, h("td", { colspan: "4", class: "muted" }, "No commands yet.")));
        err.textContent = "";
      } catch (x) {
        err.textContent = message(x);
      }
    };
    const row = (c: CommandInfo) => {
      const exit = c.exitCode == null ? (c.signal ? c.signal : "") : String(c.exitCode);
      const open = h("button", { "data-open": c.id, title: c.id }, c.command || (c.argv ?? []).join(" ") || c.id);
      open.addEventListener("click", () => show(c));
      const tr = h(
        "tr",
        { "data-id": c.id, "data-state": c.state, "data-exit": c.exitCode == null ? "" : String(c.exitCode) },
        h("td", {}, open),
        h("td", {}, c.state + (c.timedOut ? " (timed out)" : "")),
        h("td", { class: "num " + (c.exitCode === 0 ? "x-ok" : c.exitCode == null ? "" : "x-bad") }, exit),
        h("td", { class: "wide muted" }, c.startedAt ? new Date(c.startedAt).toLocaleTimeString() : ""),
      );
      if (c.id === selected) tr.classList.add("sel");
      return tr;
    };

    const show = (c: CommandInfo) => {
      selected = c.id;
      for (const tr of body.querySelectorAll("tr")) tr.classList.toggle("sel", tr.dataset.id === c.id);
      follow?.abort();
      const ctl = new AbortController();
      follow = ctl;
      title.textContent = c.command || (c.argv ?? []).join(" ");
      out.replaceChildren();
      out.dataset.command = c.id;
      out.dataset.state = "following";
      state.textContent = "replaying…";
      stream(sid, c.id, ctl.signal, (stream, text) => {
        // Text only: a span per record, its text set as text.
        const s = h("span", stream === "stderr" ? { class: "stderr" } : {});
        s.textContent = text;
        const atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
        out.append(s);
        if (atEnd) out.scrollTop = out.scrollHeight;
        if (state.textContent === "replaying…") state.textContent = "following…";
      })
        .then((end) => {
          if (ctl.signal.aborted) return;
          out.dataset.state = "ended";
          state.textContent = end;
        })
        .catch((x) => {
          if (ctl.signal.aborted) return;
          out.dataset.state = "broken";
          state.textContent = message(x);
        });
    };

    load();
    const refresh = debounce(load, 250);
    const stop = events(() => refresh(), { sandbox: sid });
    return {
      show: () => refresh(),
      close: () => {
        stop();
        follow?.abort();
      },
    };
  },
};
export default tab;

/** stream reads a command's output NDJSON from the start, following it
 * until its exit record (resumed after a break from the last seq seen); it
 * answers how the command ended. */
async function stream(sid: string, cid: string, signal: AbortSignal, on: (stream: string, text: string) => void): Promise<string> {
  let seq = 0;
  let breaks = 0;
  const decoders = new Map<string, TextDecoder>();
  const text = (st: string, b: Uint8Array, last = false) => {
    let d = decoders.get(st);
    if (!d) decoders.set(st, (d = new TextDecoder()));
    return d.decode(b, { stream: !last });
  };
  for (;;) {
    try {
      const resp = await sdk().send({
        method: "GET",
        path: `/v1/sandboxes/${encodeURIComponent(sid)}/commands/${encodeURIComponent(cid)}/output`,
        params: { after: seq, follow: "true" },
        stream: true,
        call: { signal },
      });
      const reader = resp.body!.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i: number;
        while ((i = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (!line) continue;
          const r = JSON.parse(line);
          if (r.type === "exit") {
            for (const st of decoders.keys()) {
              const rest = text(st, new Uint8Array(0), true);
              if (rest) on(st, rest);
            }
            if (r.timed_out) return "timed out";
            if (r.signal) return "killed by " + r.signal;
            return r.exit_code == null ? "ended" : `exited with ${r.exit_code}`;
          }
          if ((r.seq ?? 0) <= seq) continue;
          seq = r.seq;
          if (r.type === "truncated") {
            on("stderr", "\n[recording stopped here: the output cap was reached]\n");
            continue;
          }
          if (r.data) on(r.stream ?? "stdout", text(r.stream ?? "stdout", Uint8Array.from(atob(r.data), (c) => c.charCodeAt(0))));
        }
      }
    } catch (x) {
      if (signal.aborted || (status(x) >= 400 && status(x) < 500)) throw x;
      if (++breaks > 10) throw x;
    }
    if (signal.aborted) throw new Error("stopped");
    await new Promise((r) => setTimeout(r, 500));
  }
}
