// The cove web console: sign in with an API key (kept in sessionStorage,
// never in a URL), the team's sandboxes, and a sandbox's page with a
// terminal attached through a single-use ticket. Nothing a sandbox
// produces is rendered as HTML: text goes through textContent or xterm.js.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import "./style.css";

const KEY = "cove.key";
const app = document.getElementById("app")!;
let teardown: (() => void)[] = [];

interface Sandbox {
  id: string;
  name: string;
  template: string;
  state: string;
  state_reason?: string;
  resources: { cpus: number; memory_mib: number; disk_mib: number };
  cost_usd: number;
  spend_limit_usd: number | null;
}

class APIError extends Error {
  constructor(public status: number, public code: string, message: string) {
    super(message);
  }
}

function key(): string | null {
  return sessionStorage.getItem(KEY);
}

async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Authorization: "Bearer " + (key() ?? "") };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let v: any = null;
  try {
    v = text ? JSON.parse(text) : null;
  } catch {
    /* not JSON */
  }
  if (!r.ok) {
    const e = v?.error;
    if (r.status === 401) signOut();
    throw new APIError(r.status, e?.code ?? "http_" + r.status, e?.message ?? (text || r.statusText));
  }
  return v as T;
}

// h makes an element; strings become text nodes, never markup.
function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | boolean | ((e: any) => void)> = {},
  ...kids: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (typeof v === "boolean") {
      if (v) el.setAttribute(k, "");
    } else el.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) el.append(k);
  return el;
}

function navigate(path: string) {
  history.pushState(null, "", path);
  route();
}

function signOut() {
  sessionStorage.removeItem(KEY);
  route();
}

function route() {
  for (const f of teardown) f();
  teardown = [];
  app.replaceChildren();
  if (!key()) return signIn();
  const m = location.pathname.match(/^\/sandboxes\/([^/]+)\/?$/);
  if (m) return sandboxPage(decodeURIComponent(m[1]));
  return listPage();
}

window.addEventListener("popstate", route);

let teamLabel = "";

function signIn() {
  const input = h("input", { id: "key", type: "password", autocomplete: "off", placeholder: "cove_…", required: true });
  const err = h("p", { class: "error", id: "signin-error", role: "alert" });
  const form = h(
    "form",
    { id: "signin", class: "card signin" },
    h("h1", {}, "cove console"),
    h("label", { for: "key" }, "API key"),
    input,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    h("p", { class: "muted" }, "The key stays in this tab's session storage."),
    err,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, input.value.trim());
    try {
      await loadTeam();
      route();
    } catch (x) {
      sessionStorage.removeItem(KEY);
      err.textContent = (x as Error).message;
    }
  });
  app.append(form);
  input.focus();
}

async function loadTeam() {
  try {
    const me = await api<{ team: { name: string }; admin: boolean }>("GET", "/v1/teams/me");
    teamLabel = me.team.name + (me.admin ? " (admin)" : "");
    return;
  } catch (x) {
    // A server without /v1/teams/me: the caller's team from GET /v1/teams.
    if ((x as APIError).status !== 404) throw x;
  }
  const r = await api<{ items: { name: string }[] }>("GET", "/v1/teams");
  const items = r.items ?? [];
  teamLabel = items.length === 1 ? items[0].name : `admin · ${items.length} teams`;
}

function topBar(): HTMLElement {
  const team = h("span", { id: "team", class: "team" }, teamLabel);
  if (!teamLabel) loadTeam().then(() => (team.textContent = teamLabel), () => {});
  return h(
    "header",
    { class: "top" },
    h("a", { href: "/", class: "brand", onclick: (e: Event) => (e.preventDefault(), navigate("/")) }, "cove"),
    team,
    h("button", { id: "signout", onclick: signOut }, "Sign out"),
  );
}

// events calls on() for each event of the team's stream, read with fetch
// so that the key goes in a header, and follows on after a break.
function events(on: (type: string) => void): () => void {
  const ctl = new AbortController();
  let last = "";
  (async () => {
    while (!ctl.signal.aborted) {
      try {
        const headers: Record<string, string> = { Authorization: "Bearer " + key(), Accept: "text/event-stream" };
        if (last) headers["Last-Event-ID"] = last;
        const r = await fetch("/v1/events/stream", { headers, signal: ctl.signal });
        if (!r.ok || !r.body) throw new Error("events: " + r.status);
        const rd = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        let type = "";
        for (;;) {
          const { value, done } = await rd.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, i).replace(/\r$/, "");
            buf = buf.slice(i + 1);
            if (line.startsWith("id:")) last = line.slice(3).trim();
            else if (line.startsWith("event:")) type = line.slice(6).trim();
            else if (line === "" && type) {
              on(type);
              type = "";
            }
          }
        }
      } catch {
        if (ctl.signal.aborted) return;
      }
      await new Promise((r) => setTimeout(r, 2000));
    }
  })();
  return () => ctl.abort();
}

function debounce(f: () => void, ms: number): () => void {
  let t: number | undefined;
  return () => {
    clearTimeout(t);
    t = window.setTimeout(f, ms);
  };
}

const STATES = ["", "running", "creating", "sleeping", "asleep", "waking", "terminated", "failed"];

function money(v: number | null | undefined): string {
  return v == null ? "none" : "$" + v.toFixed(4);
}

async function createAndOpen(btn: HTMLButtonElement, err: HTMLElement) {
  btn.disabled = true;
  btn.textContent = "Creating…";
  err.textContent = "";
  try {
    const sb = await api<Sandbox>("POST", "/v1/sandboxes", {});
    navigate("/sandboxes/" + encodeURIComponent(sb.id));
  } catch (x) {
    err.textContent = "Could not create a sandbox: " + (x as Error).message;
    btn.disabled = false;
    btn.textContent = "New → Run code";
  }
}

function listPage() {
  const filter = h("select", { id: "state-filter", "aria-label": "state" }, ...STATES.map((s) => h("option", { value: s }, s || "all states")));
  const search = h("input", { id: "search", type: "search", placeholder: "Open a sandbox by ID or name", autocomplete: "off" });
  const err = h("p", { class: "error", id: "list-error", role: "alert" });
  const newBtn = h("button", { id: "new", class: "primary" }, "New → Run code");
  newBtn.addEventListener("click", () => createAndOpen(newBtn, err));
  const rows = h("tbody", { id: "sandboxes" });
  const searchForm = h("form", { id: "open", class: "open" }, search);
  searchForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const ref = search.value.trim();
    if (ref) navigate("/sandboxes/" + encodeURIComponent(ref));
  });
  app.append(
    topBar(),
    h(
      "main",
      {},
      h("div", { class: "toolbar" }, searchForm, filter, newBtn),
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
    const q = filter.value ? "&state=" + encodeURIComponent(filter.value) : "";
    try {
      const r = await api<{ items: Sandbox[] }>("GET", "/v1/sandboxes?limit=200" + q);
      if (my !== gen) return;
      let items = r.items ?? [];
      if (filter.value) items = items.filter((s) => s.state === filter.value);
      err.textContent = "";
      rows.replaceChildren(
        ...items.map((s) =>
          h(
            "tr",
            { class: "row", "data-id": s.id, onclick: () => navigate("/sandboxes/" + encodeURIComponent(s.id)) },
            h("td", {}, h("a", { href: "/sandboxes/" + encodeURIComponent(s.id), onclick: (e: Event) => e.preventDefault() }, s.name || s.id), h("div", { class: "muted mono" }, s.id)),
            h("td", {}, h("span", { class: "state s-" + s.state }, s.state)),
            h("td", { class: "wide" }, s.template),
            h("td", { class: "num" }, money(s.cost_usd)),
          ),
        ),
      );
      if (!items.length) rows.append(h("tr", {}, h("td", { colspan: "4", class: "muted" }, "No sandboxes.")));
    } catch (x) {
      err.textContent = (x as Error).message;
    }
  };
  filter.addEventListener("change", load);
  load();
  const refresh = debounce(load, 300);
  teardown.push(events(() => refresh()));
  search.focus();
}

function sandboxPage(ref: string) {
  const title = h("h1", { id: "sb-name" }, ref);
  const state = h("span", { id: "sb-state", class: "state" }, "…");
  const facts = h("dl", { class: "facts", id: "sb-facts" });
  const err = h("p", { class: "error", id: "sb-error", role: "alert" });
  const btn = (id: string, label: string) => h("button", { id }, label);
  const sleepB = btn("sleep", "Sleep");
  const wakeB = btn("wake", "Wake");
  const termB = btn("terminate", "Terminate");
  termB.classList.add("danger");
  const termBox = h("div", { id: "terminal", class: "terminal" });
  const chips = h("div", { class: "chips", id: "chips" });
  const termStatus = h("span", { id: "term-status", class: "muted" });
  app.append(
    topBar(),
    h(
      "main",
      {},
      h("div", { class: "sbhead" }, h("div", {}, title, state), h("div", { class: "actions" }, sleepB, wakeB, termB)),
      facts,
      err,
      h("div", { class: "tabs" }, h("span", { class: "tab active" }, "Terminal"), termStatus),
      chips,
      termBox,
    ),
  );
  let sb: Sandbox | null = null;
  let busy = "";
  let term: TermSession | null = null;
  const render = () => {
    if (!sb) return;
    title.textContent = sb.name || sb.id;
    state.textContent = busy || sb.state;
    state.className = "state s-" + (busy ? "busy" : sb.state);
    const r = sb.resources;
    facts.replaceChildren(
      ...([
        ["ID", sb.id],
        ["Template", sb.template],
        ["Resources", `${r.cpus} CPU · ${r.memory_mib} MiB · ${r.disk_mib} MiB disk`],
        ["Cost", money(sb.cost_usd)],
        ["Spend limit", money(sb.spend_limit_usd)],
      ] as [string, string][]).flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-fact": k.toLowerCase() }, v)]),
    );
    const s = sb.state;
    sleepB.disabled = !!busy || s !== "running";
    wakeB.disabled = !!busy || !(s === "sleeping" || s === "asleep");
    termB.disabled = !!busy || s === "terminated" || s === "terminating";
    if (s === "running" && !term) term = openTerminal(sb.id, termBox, termStatus, chips);
    if (s !== "running" && term) {
      term.close();
      term = null;
    }
  };
  const load = async () => {
    try {
      sb = await api<Sandbox>("GET", "/v1/sandboxes/" + encodeURIComponent(ref));
      err.textContent = "";
      render();
    } catch (x) {
      err.textContent = (x as Error).message;
      if ((x as APIError).status === 404) state.textContent = "not found";
    }
  };
  const act = async (label: string, method: string, path: string) => {
    if (!sb) return;
    busy = label;
    render();
    try {
      const r = await api<Sandbox | null>(method, "/v1/sandboxes/" + encodeURIComponent(sb.id) + path);
      if (r && (r as Sandbox).id) sb = r as Sandbox;
    } catch (x) {
      err.textContent = (x as Error).message;
    }
    busy = "";
    await load();
  };
  sleepB.addEventListener("click", () => act("sleeping…", "POST", "/sleep"));
  wakeB.addEventListener("click", () => act("waking…", "POST", "/wake"));
  termB.addEventListener("click", () => {
    if (confirm(`Terminate ${sb?.name || ref}? Its files and processes are gone for good.`)) act("terminating…", "DELETE", "");
  });
  load();
  const refresh = debounce(load, 300);
  teardown.push(events(() => refresh()));
  teardown.push(() => term?.close());
}

interface TermSession {
  close(): void;
}

const EXAMPLES = ["python3 --version", "ls -la", "git status", 'node -e "console.log(1+1)"'];

// openTerminal runs `bash -l` on a PTY in the sandbox and attaches xterm.js
// to it through a single-use ticket.
function openTerminal(id: string, box: HTMLElement, status: HTMLElement, chips: HTMLElement): TermSession {
  const term = new Terminal({ cursorBlink: true, fontSize: 14, convertEol: false, scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  box.replaceChildren();
  term.open(box);
  fit.fit();
  const enc = new TextEncoder();
  let ws: WebSocket | null = null;
  let closed = false;
  const send = (d: string | Uint8Array) => {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(typeof d === "string" ? enc.encode(d) : d);
  };
  chips.replaceChildren(
    ...EXAMPLES.map((ex) =>
      h("button", { class: "chip", "data-example": ex, title: "Type it at the prompt", onclick: () => (send(ex), term.focus()) }, ex),
    ),
  );
  term.onData((d) => send(d));
  term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0))));
  const resize = () => {
    fit.fit();
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: { cols: term.cols, rows: term.rows } }));
  };
  const onResize = debounce(resize, 100);
  window.addEventListener("resize", onResize);
  status.textContent = "connecting…";
  (async () => {
    try {
      const cmd = await api<{ id: string }>("POST", `/v1/sandboxes/${encodeURIComponent(id)}/commands`, {
        command: "bash -l",
        pty: { cols: term.cols, rows: term.rows },
        stdin: true,
      });
      const path = `/v1/sandboxes/${encodeURIComponent(id)}/commands/${encodeURIComponent(cmd.id)}/attach`;
      const { ticket } = await api<{ ticket: string }>("POST", "/v1/tickets", { path });
      if (closed) return;
      const proto = location.protocol === "https:" ? "wss:" : "ws:";
      ws = new WebSocket(`${proto}//${location.host}${path}?ticket=${encodeURIComponent(ticket)}`);
      ws.binaryType = "arraybuffer";
      ws.onopen = () => {
        status.textContent = "connected";
        box.dataset.ready = "1";
        resize();
        term.focus();
      };
      ws.onmessage = (m) => {
        if (typeof m.data === "string") {
          try {
            const f = JSON.parse(m.data);
            if (f.exit_code !== undefined) status.textContent = `exited with ${f.exit_code}`;
          } catch {
            /* not a control frame */
          }
          return;
        }
        term.write(new Uint8Array(m.data as ArrayBuffer));
      };
      ws.onclose = () => {
        if (!closed && !status.textContent?.startsWith("exited")) status.textContent = "disconnected";
        delete box.dataset.ready;
      };
    } catch (x) {
      status.textContent = "terminal failed: " + (x as Error).message;
    }
  })();
  return {
    close() {
      closed = true;
      window.removeEventListener("resize", onResize);
      ws?.close();
      term.dispose();
    },
  };
}

if (key()) loadTeam().catch(() => {});
route();
