// The team page (/team, the top bar's Team link): the team, its
// admissions, and its volumes (GET /v1/volumes): size, bytes used and the
// sandboxes that mount each, with create (POST /v1/volumes) and delete
// (DELETE /v1/volumes/{id}; a 409 names the sandboxes that use it, shown
// as the API says it). The list follows the team's event stream. Names
// and messages are shown as text only.
import { api, events } from "./api";
import { ask } from "./confirm";
import { debounce, h, message } from "./dom";
import { sandboxURL } from "./list";
import { app, navigate, onLeave } from "./router";
import { loadTeam, team, topBar } from "./team";
import { bytes } from "./tabs/network";

/** Volume as GET /v1/volumes answers it (api/volumes.go). */
export interface Volume {
  id: string;
  team_id: string;
  name: string;
  size_mib: number;
  used_bytes: number;
  sandboxes: string[] | null;
  node?: string;
  created_at: string;
}

interface VolumeList {
  items: Volume[] | null;
  next_cursor?: string;
}

/** volumes reads every volume of the team, page after page. */
export async function volumes(): Promise<Volume[]> {
  const out: Volume[] = [];
  let cursor = "";
  for (;;) {
    const r = await api<VolumeList>("GET", "/v1/volumes?limit=200" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
    out.push(...(r.items ?? []));
    if (!r.next_cursor) return out;
    cursor = r.next_cursor;
  }
}

function sandboxLink(id: string): HTMLElement {
  return h("a", { href: sandboxURL(id), class: "mono", onclick: (e: Event) => (e.preventDefault(), navigate(sandboxURL(id))) }, id);
}

export function teamPage() {
  const title = h("h1", { class: "pagetitle", id: "team-name" }, "Team");
  const facts = h("dl", { class: "facts", id: "team-facts" });
  const nameIn = h("input", { id: "vol-name", placeholder: "name, e.g. datasets", "aria-label": "volume name", autocomplete: "off" });
  const sizeIn = h("input", { id: "vol-size", type: "number", min: "16", step: "1", value: "1024", "aria-label": "size in MiB", class: "count" });
  const create = h("button", { id: "vol-create", type: "submit", class: "primary" }, "Create volume");
  const form = h("form", { id: "vol-form", class: "inline" }, nameIn, h("label", { for: "vol-size" }, "MiB"), sizeIn, create);
  const result = h("p", { id: "vol-result", role: "status", class: "muted" });
  const err = h("p", { class: "error", id: "vol-error", role: "alert" });
  const rows = h("tbody", { id: "vol-rows" });
  app.append(
    topBar(),
    h(
      "main",
      {},
      title,
      facts,
      h("h2", { class: "subtitle" }, "Volumes"),
      h("p", { class: "muted" }, "Disks of the team that outlive sandboxes; several sandboxes mount one at once. The size is a quota, charged as storage."),
      form,
      result,
      err,
      h(
        "table",
        { class: "list stack" },
        h(
          "thead",
          {},
          h("tr", {}, h("th", {}, "Name"), h("th", {}, "ID"), h("th", { class: "num" }, "Size"), h("th", {}, "Used"), h("th", {}, "Mounted by"), h("th", {}, "Created"), h("th", {}, "")),
        ),
        rows,
      ),
    ),
  );

  const showTeam = () => {
    const me = team();
    if (!me) return;
    title.textContent = "Team " + me.team.name;
    const kv: [string, string][] = [["Name", me.team.name]];
    if (me.team.id) kv.push(["ID", me.team.id]);
    kv.push(["Admin", me.admin ? "yes" : "no"]);
    if (me.admitted) kv.push(["Admitted", me.admitted.length ? me.admitted.map((k) => k.replace(/_/g, " ")).join(", ") : "nothing"]);
    facts.replaceChildren(...kv.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  };
  showTeam();
  if (!team()) loadTeam().then(showTeam, () => {});

  const remove = async (v: Volume, b: HTMLButtonElement) => {
    const yes = await ask("vol-delete-dialog", "Delete this volume?", `Volume ${v.name} (${v.id}) and its files are gone for good.`, "Delete");
    if (!yes) return;
    b.disabled = true;
    result.textContent = "";
    err.textContent = "";
    try {
      await api("DELETE", "/v1/volumes/" + encodeURIComponent(v.id));
      result.textContent = `Deleted ${v.name}.`;
    } catch (x) {
      err.textContent = `Could not delete ${v.name}: ${message(x)}`;
    }
    b.disabled = false;
    await load();
  };

  let gen = 0;
  let listFailed = false;
  let drawn = "";
  const load = async () => {
    const my = ++gen;
    try {
      const items = await volumes();
      if (my !== gen) return;
      // The rows are drawn again only when the list changed: a row being
      // used (focused, clicked) is not replaced under the pointer.
      const key = JSON.stringify(items);
      if (key !== drawn) draw(items);
      drawn = key;
      rows.dataset.loaded = String(items.length);
      // A failed read's message goes once the list reads again; an
      // action's stays until the next action.
      if (listFailed) err.textContent = "";
      listFailed = false;
    } catch (x) {
      if (my !== gen) return;
      err.textContent = "Could not list the volumes: " + message(x);
      listFailed = true;
    }
  };
  const draw = (items: Volume[]) => {
    rows.replaceChildren(
      ...items.map((v) => {
        const size = v.size_mib * 1024 * 1024;
        const used = h("meter", { min: "0", max: String(size), value: String(Math.min(v.used_bytes, size)), "aria-label": "used of " + v.name });
        const db = h("button", { class: "delete danger", "data-id": v.id, "aria-label": "delete " + v.name }, "Delete");
        db.addEventListener("click", () => remove(v, db));
        const sbs = v.sandboxes ?? [];
        return h(
          "tr",
          { class: "vol", "data-id": v.id, "data-name": v.name, "data-used": String(v.used_bytes), "data-sandboxes": sbs.join(" ") },
          h("td", { "data-label": "Name" }, v.name, v.node ? h("div", { class: "muted" }, "on " + v.node) : null),
          h("td", { class: "mono", "data-label": "ID" }, v.id),
          h("td", { class: "num", "data-label": "Size" }, bytes(size)),
          h("td", { "data-label": "Used", class: "used" }, used, " ", bytes(v.used_bytes)),
          h("td", { "data-label": "Mounted by", class: "mounts" }, ...(sbs.length ? sbs.flatMap((id, i) => (i ? [" ", sandboxLink(id)] : [sandboxLink(id)])) : [h("span", { class: "muted" }, "none")])),
          h("td", { "data-label": "Created" }, new Date(v.created_at).toLocaleString()),
          h("td", {}, db),
        );
      }),
    );
    if (!items.length) rows.append(h("tr", {}, h("td", { colspan: "7", class: "muted" }, "No volumes yet.")));
  };

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const name = nameIn.value.trim();
    create.disabled = true;
    result.textContent = "";
    err.textContent = "";
    try {
      const v = await api<Volume>("POST", "/v1/volumes", { name, size_mib: Number(sizeIn.value) });
      result.textContent = `Created ${v.name} (${v.id}, ${v.size_mib} MiB).`;
      nameIn.value = "";
    } catch (x) {
      err.textContent = "Could not create the volume: " + message(x);
    }
    create.disabled = false;
    await load();
  });

  load();
  const refresh = debounce(load, 300);
  onLeave(events(() => refresh()));
}
