// The signed-in team: its name and admission, shown in the top bar.
import { api, status } from "./api";
import { h } from "./dom";
import { navigate, signOut } from "./router";

export interface Me {
  team: { id?: string; name: string };
  admin: boolean;
  /** The admission flags the team holds: managed_environment, preview, custom_images, gpu. */
  admitted?: string[];
}

let me: Me | null = null;

/** loadTeam reads the caller's team (GET /v1/teams/me). */
export async function loadTeam(): Promise<Me> {
  try {
    me = await api<Me>("GET", "/v1/teams/me");
    return me;
  } catch (x) {
    // A server without /v1/teams/me: the caller's team from GET /v1/teams.
    if (status(x) !== 404) throw x;
  }
  const r = await api<{ items: { name: string }[] }>("GET", "/v1/teams");
  const items = r.items ?? [];
  me = { team: { name: items.length === 1 ? items[0].name : `${items.length} teams` }, admin: items.length !== 1 };
  return me;
}

export function team(): Me | null {
  return me;
}

/** admitted says whether the team holds an admission flag. */
export function admitted(flag: string): boolean {
  return !!me?.admitted?.includes(flag);
}

export function forgetTeam() {
  me = null;
}

function label(m: Me | null): string {
  if (!m) return "";
  return m.team.name + (m.admin ? " (admin)" : "");
}

function admissionText(m: Me | null): string {
  if (!m?.admitted) return "";
  const on = m.admitted.map((k) => k.replace(/_/g, " "));
  return on.length ? "admitted: " + on.join(", ") : "no admissions";
}

export function topBar(): HTMLElement {
  const name = h("span", { id: "team", class: "team" }, label(me));
  const adm = h("span", { id: "admission", class: "muted admission" }, admissionText(me));
  if (!me)
    loadTeam().then(
      (m) => ((name.textContent = label(m)), (adm.textContent = admissionText(m))),
      () => {},
    );
  return h(
    "header",
    { class: "top" },
    h("a", { href: "/", class: "brand", onclick: (e: Event) => (e.preventDefault(), navigate("/")) }, "cove"),
    name,
    adm,
    h("a", { href: "/team", id: "team-link", class: "toplink", onclick: (e: Event) => (e.preventDefault(), navigate("/team")) }, "Team"),
    h("a", { href: "/usage", id: "usage-link", class: "toplink", onclick: (e: Event) => (e.preventDefault(), navigate("/usage")) }, "Usage"),
    h("button", { id: "signout", onclick: () => (forgetTeam(), signOut()) }, "Sign out"),
  );
}
