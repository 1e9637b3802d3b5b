// The snapshots tab: the sandbox's snapshots (GET /v1/snapshots?sandbox=),
// taking one, returning the sandbox to one (after a question: its running
// commands end), deleting one (a 409 names the sandboxes that stand on it,
// shown as the API says it), and forking the sandbox into new ones, listed
// with links to their pages. Names and messages are shown as text only.
import type { SandboxInfo, Snapshot } from "@cove-dev/sdk";
import { sandboxOf, sdk } from "../api";
import { ask } from "../confirm";
import { h, message } from "../dom";
import { sandboxURL } from "../list";
import { navigate } from "../router";
import type { Tab, TabContext } from "../tab";
import { bytes } from "./network";

/** Only a running or asleep sandbox is snapshotted, restored or forked. */
const ACTIVE = new Set(["running", "asleep"]);
const SETTLED = new Set(["running", "asleep", "terminated", "failed"]);

/** names reads "a, b c" as ["a", "b", "c"]. */
function names(s: string): string[] {
  return s
    .split(/[\s,]+/)
    .map((x) => x.trim())
    .filter((x) => x);
}

const tab: Tab = {
  id: "snapshots",
  label: "Snapshots",
  mount(ctx: TabContext) {
    const nameIn = h("input", { id: "snap-name", placeholder: "name, e.g. deps-installed", "aria-label": "snapshot name", autocomplete: "off" });
    const take = h("button", { id: "snap-take", type: "submit", class: "primary" }, "Take snapshot");
    const takeForm = h("form", { id: "snap-form", class: "inline" }, nameIn, take);
    const note = h("p", { id: "snap-note", class: "muted" });
    const result = h("p", { id: "snap-result", role: "status", class: "muted" });
    const err = h("p", { class: "error", id: "snap-error", role: "alert" });
    const rows = h("tbody", { id: "snap-rows" });
    const reload = h("button", { id: "snap-reload", type: "button" }, "Refresh");

    const countIn = h("input", { id: "fork-count", type: "number", min: "1", value: "1", "aria-label": "copies", class: "count" });
    const forkNames = h("input", { id: "fork-names", placeholder: "names (optional): try-1, try-2", "aria-label": "names of the new sandboxes", autocomplete: "off" });
    const forkB = h("button", { id: "fork-go", type: "submit" }, "Fork");
    const forkForm = h("form", { id: "fork-form", class: "inline" }, h("label", { for: "fork-count" }, "Copies"), countIn, forkNames, forkB);
    const forkErr = h("p", { class: "error", id: "fork-error", role: "alert" });
    const forkStatus = h("p", { id: "fork-status", role: "status", class: "muted" });
    const forks = h("ul", { id: "fork-result", class: "forks" });

    ctx.el.append(
      h("div", { class: "termbar" }, takeForm, reload),
      note,
      result,
      err,
      h(
        "table",
        { class: "list stack" },
        h(
          "thead",
          {},
          h("tr", {}, h("th", {}, "Name"), h("th", {}, "ID"), h("th", { class: "num" }, "Stored"), h("th", { class: "num" }, "Files"), h("th", {}, "Taken"), h("th", {}, "")),
        ),
        rows,
      ),
      h("h2", { class: "subtitle" }, "Fork"),
      h("p", { class: "muted" }, "New sandboxes from this one's files as they are now, each on its own from then on."),
      forkForm,
      forkErr,
      forkStatus,
      forks,
    );

    let busy = false;
    const enable = () => {
      const s = ctx.sandbox().state;
      const on = ACTIVE.has(s) && !busy;
      take.disabled = !on;
      forkB.disabled = !on;
      for (const b of rows.querySelectorAll<HTMLButtonElement>("button.restore")) b.disabled = !on;
      note.textContent = ACTIVE.has(s) ? "" : `The sandbox is ${s}: only a running or asleep sandbox is snapshotted, restored or forked.`;
    };
    // during runs f with the tab's actions off, then reloads the list.
    const during = async (f: () => Promise<void>) => {
      busy = true;
      enable();
      try {
        await f();
      } finally {
        busy = false;
        enable();
      }
    };

    const restore = async (s: Snapshot) => {
      const sb = ctx.sandbox();
      const yes = await ask(
        "restore-dialog",
        "Restore this sandbox?",
        `${sb.name || sb.id} returns to snapshot ${s.name}: its running commands end and its files are replaced by the snapshot's. Its ID, name, network and history stay.`,
        "Restore",
      );
      if (!yes) return;
      result.textContent = `Restoring to ${s.name}…`;
      err.textContent = "";
      await during(async () => {
        try {
          await sandboxOf(ctx.sandbox()).restore(s.id, { wait: false });
          result.textContent = `Restored to ${s.name}.`;
        } catch (x) {
          result.textContent = "";
          err.textContent = `Could not restore to ${s.name}: ${message(x)}`;
        }
        await ctx.refresh();
      });
    };

    const remove = async (s: Snapshot, b: HTMLButtonElement) => {
      const yes = await ask("snap-delete-dialog", "Delete this snapshot?", `Snapshot ${s.name} (${s.id}) is gone for good.`, "Delete");
      if (!yes) return;
      b.disabled = true;
      result.textContent = "";
      err.textContent = "";
      try {
        await sdk().deleteSnapshot(s.id);
        result.textContent = `Deleted ${s.name}.`;
      } catch (x) {
        err.textContent = `Could not delete ${s.name}: ${message(x)}`;
      }
      b.disabled = false;
      await load();
    };

    let gen = 0;
    let listFailed = false;
    let drawn = "";
    const afterLoad = (n: number) => {
      rows.dataset.loaded = String(n);
      enable();
      // A failed read's message goes once the list reads again; an
      // action's stays until the next action.
      if (listFailed) err.textContent = "";
      listFailed = false;
    };
    const load = async () => {
      const my = ++gen;
      try {
        const items: Snapshot[] = [];
        for await (const s of sdk().listSnapshots({ sandbox: ctx.sandbox().id })) items.push(s);
        if (my !== gen) return;
        // The rows are drawn again only when the list changed: a row
        // being used (focused, clicked) is not replaced under the pointer.
        const key = JSON.stringify(items);
        if (key === drawn) return afterLoad(items.length);
        drawn = key;
        rows.replaceChildren(
          ...items.map((s) => {
            const rb = h("button", { class: "restore", "data-id": s.id, "aria-label": "restore to " + s.name }, "Restore");
            const db = h("button", { class: "delete danger", "data-id": s.id, "aria-label": "delete " + s.name }, "Delete");
            rb.addEventListener("click", () => restore(s));
            db.addEventListener("click", () => remove(s, db));
            return h(
              "tr",
              { class: "snap", "data-id": s.id, "data-name": s.name },
              h("td", { "data-label": "Name" }, s.name, s.fork ? h("span", { class: "muted" }, " (fork)") : null),
              h("td", { class: "mono", "data-label": "ID" }, s.id),
              h("td", { class: "num", "data-label": "Stored" }, bytes(s.sizeBytes)),
              h("td", { class: "num", "data-label": "Files" }, bytes(s.dataBytes)),
              h("td", { "data-label": "Taken" }, new Date(s.createdAt).toLocaleString()),
              h("td", {}, h("div", { class: "rowactions" }, rb, db)),
            );
          }),
        );
        if (!items.length) rows.append(h("tr", {}, h("td", { colspan: "6", class: "muted" }, "No snapshots of this sandbox yet.")));
        afterLoad(items.length);
      } catch (x) {
        if (my !== gen) return;
        err.textContent = "Could not list the snapshots: " + message(x);
        listFailed = true;
      }
    };

    takeForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const name = nameIn.value.trim();
      result.textContent = name ? `Taking ${name}…` : "";
      err.textContent = "";
      during(async () => {
        try {
          const s = await sandboxOf(ctx.sandbox()).snapshot(name);
          result.textContent = `Took ${s.name} (${s.id}, ${bytes(s.sizeBytes)} stored).`;
          nameIn.value = "";
        } catch (x) {
          result.textContent = "";
          err.textContent = "Could not take a snapshot: " + message(x);
        }
        await load();
      });
    });

    // The new sandboxes, as last read; their states follow the team's
    // events (each refresh of the header) until they settle.
    let made: SandboxInfo[] = [];
    const drawForks = () => {
      forks.replaceChildren(
        ...made.map((s) =>
          h(
            "li",
            { class: "fork", "data-id": s.id },
            h("a", { href: sandboxURL(s.id), onclick: (e: Event) => (e.preventDefault(), navigate(sandboxURL(s.id))) }, s.name || s.id),
            h("span", { class: "muted mono" }, " " + s.id),
            h("span", { class: "state s-" + s.state }, s.state),
          ),
        ),
      );
    };
    const followForks = async () => {
      const moving = made.filter((s) => !SETTLED.has(s.state));
      if (!moving.length) return;
      const now = await Promise.all(moving.map((s) => sdk().get(s.id).then((x) => x.info, () => s)));
      const by = new Map(now.map((s) => [s.id, s]));
      made = made.map((s) => by.get(s.id) ?? s);
      drawForks();
    };
    forkNames.addEventListener("input", () => {
      const n = names(forkNames.value).length;
      if (n) countIn.value = String(n);
    });
    forkForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const count = Number(countIn.value);
      const given = names(forkNames.value);
      forkErr.textContent = "";
      forkStatus.textContent = `Forking into ${count}…`;
      during(async () => {
        try {
          const out = await sandboxOf(ctx.sandbox()).fork(count, { names: given.length ? given : undefined, wait: false });
          made = out.map((s) => s.info);
          forkStatus.textContent = `Forked into ${made.length}:`;
          forkNames.value = "";
          drawForks();
        } catch (x) {
          forkStatus.textContent = "";
          forkErr.textContent = "Could not fork: " + message(x);
        }
        await load();
      });
    });

    reload.addEventListener("click", load);
    let t: number | undefined;
    ctx.onChange(() => {
      enable();
      if (ctx.el.hidden) return;
      clearTimeout(t);
      t = window.setTimeout(() => {
        load();
        followForks();
      }, 300);
    });
    enable();
    return { show: load, close: () => clearTimeout(t) };
  },
};

export default tab;
