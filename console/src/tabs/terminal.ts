// The terminal tab: `bash -l` on a PTY in the sandbox, xterm.js attached
// through a single-use ticket; example chips type their text at the prompt
// without running it. The shell's command ID is kept in sessionStorage per
// sandbox, so a reload reattaches to the same shell (the attach replays its
// output) while it still runs.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import { api, sandboxOf, sdk } from "../api";
import { debounce, h, message } from "../dom";
import type { Command, Sandbox, SandboxInfo } from "@cove-dev/sdk";
import type { Tab, TabContext } from "../tab";

const EXAMPLES = ["python3 --version", "ls -la", "git status", 'node -e "console.log(1+1)"'];

interface Session {
  close(): void;
  fit(): void;
}

const tab: Tab = {
  id: "terminal",
  label: "Terminal",
  mount(ctx: TabContext) {
    const status = h("span", { id: "term-status", class: "muted" });
    const chips = h("div", { class: "chips", id: "chips" });
    const box = h("div", { id: "terminal", class: "terminal" });
    ctx.el.append(h("div", { class: "termbar" }, chips, status), box);
    let term: Session | null = null;
    const follow = () => {
      const s = ctx.sandbox().state;
      if (s === "running" && !term) term = openTerminal(ctx.sandbox(), box, status, chips);
      if (s !== "running" && term) {
        term.close();
        term = null;
        status.textContent = "the sandbox is " + s;
      }
    };
    ctx.onChange(follow);
    follow();
    return {
      show: () => term?.fit(),
      close: () => term?.close(),
    };
  },
};
export default tab;

// openTerminal runs `bash -l` on a PTY in the sandbox and attaches xterm.js
// to it through a single-use ticket.
function openTerminal(info: SandboxInfo, box: HTMLElement, status: HTMLElement, chips: HTMLElement): Session {
  const id = info.id;
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
  const chip = (ex: string) =>
    h("button", { class: "chip", "data-example": ex, title: "Type it at the prompt", onclick: () => (send(ex), term.focus()) }, ex);
  chips.replaceChildren(...EXAMPLES.map(chip));
  imageExamples(info).then((more) => {
    if (closed) return;
    const have = new Set(EXAMPLES);
    for (const ex of more) if (!have.has(ex)) (have.add(ex), chips.append(chip(ex)));
  });
  term.onData((d) => send(d));
  term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0))));
  const resize = () => {
    if (!box.offsetWidth) return;
    fit.fit();
    if (ws && ws.readyState === WebSocket.OPEN) {
      ws.send(JSON.stringify({ resize: { cols: term.cols, rows: term.rows } }));
      // What the PTY was last told, for a look from outside.
      box.dataset.size = `${term.rows} ${term.cols}`;
    }
  };
  const onResize = debounce(resize, 100);
  window.addEventListener("resize", onResize);
  status.textContent = "connecting…";
  (async () => {
    try {
      const sb = sandboxOf(info);
      const cmd = (await reattach(sb, id)) ?? (await sb.start("bash -l", { pty: { cols: term.cols, rows: term.rows }, stdin: true }));
      sessionStorage.setItem(SHELL + id, cmd.id);
      const path = `/v1/sandboxes/${encodeURIComponent(id)}/commands/${encodeURIComponent(cmd.id)}/attach`;
      const { ticket } = await sdk().createTicket(path);
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
            const x = f.exit ?? f;
            if (x.exit_code !== undefined) {
              status.textContent = `exited with ${x.exit_code}`;
              sessionStorage.removeItem(SHELL + id);
            }
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
      status.textContent = "terminal failed: " + message(x);
    }
  })();
  return {
    fit: resize,
    close() {
      closed = true;
      window.removeEventListener("resize", onResize);
      ws?.close();
      term.dispose();
    },
  };
}

/** Where the sandbox's shell command ID is kept (sessionStorage, + sandbox ID). */
const SHELL = "cove.shell.";

/** reattach is the shell this page opened before, when it still runs. */
async function reattach(sb: Sandbox, id: string): Promise<Command | null> {
  const cid = sessionStorage.getItem(SHELL + id);
  if (!cid) return null;
  try {
    const c = await sb.command(cid);
    if (c.info.state === "running") return c;
  } catch {
    /* gone: start a new one */
  }
  sessionStorage.removeItem(SHELL + id);
  return null;
}

/** imageExamples are the example commands the sandbox's image or
 * template offers (an `examples` list), when it offers any. */
async function imageExamples(sb: SandboxInfo): Promise<string[]> {
  const pick = (d: any): string[] =>
    Array.isArray(d?.examples) ? d.examples.filter((x: unknown): x is string => typeof x === "string" && x.length > 0 && x.length < 200).slice(0, 12) : [];
  const image = (d: any): string => (typeof d?.image === "string" ? d.image : typeof d?.image_id === "string" ? d.image_id : "");
  try {
    let img = image(sb);
    if (!img && sb.template) {
      const { items } = await api<{ items?: any[] }>("GET", "/v1/templates");
      const t = (items ?? []).find((x) => x?.name === sb.template);
      const own = pick(t);
      if (own.length) return own;
      img = image(t);
    }
    if (img) return pick(await api<any>("GET", "/v1/images/" + encodeURIComponent(img)));
  } catch {
    /* no images or templates with examples here */
  }
  return [];
}
