// Attach: a WebSocket to a running command. Binary frames carry input and
// output; text frames carry resizes in and the exit out.
//
// On Node the optional `ws` package is loaded when first needed, and sends
// the Authorization header. Browsers cannot send that header on a
// WebSocket: there the global WebSocket opens the URL with a single-use
// ticket (POST /v1/tickets) instead.

import type { Client } from "./client.js";
import { Cancelled, CoveError, Unavailable, errorFrom } from "./errors.js";
import { Data, camel, commandPath, toBytes } from "./util.js";

export interface AttachOptions {
  /** Replay output after this seq. */
  after?: number;
  /** Authenticate with a single-use ticket (POST /v1/tickets) instead of
   * the Authorization header. Always so with the global WebSocket
   * (browsers); on Node with `ws` only when asked. */
  ticket?: boolean;
  /** Aborting it closes the attachment (the command goes on); before it
   * opened, the call fails with `Cancelled`. */
  signal?: AbortSignal;
}

export interface ExitInfo {
  exitCode: number | null;
  signal: string;
  timedOut: boolean;
}

interface WSLike {
  binaryType: string;
  readyState: number;
  send(data: unknown): void;
  close(code?: number): void;
  addEventListener(type: string, fn: (ev: any) => void): void;
}

const isNode = typeof (globalThis as any).process?.versions?.node === "string";

async function loadWs(): Promise<any | null> {
  if (!isNode) return null;
  try {
    const name = "ws"; // kept out of bundlers' static analysis
    const m: any = await import(name);
    return m.default ?? m.WebSocket ?? m;
  } catch {
    return null;
  }
}

/** A live connection to a command: `await recv()` returns output bytes, or
 * null once the command has ended (exit then holds its exit code, signal
 * and timedOut) or the connection closed. Also an async iterable of the
 * output. */
export class Attachment implements AsyncIterable<Uint8Array> {
  exit: ExitInfo | null = null;
  private queue: Array<Uint8Array | null> = [];
  private waiters: Array<(v: Uint8Array | null) => void> = [];
  private closed = false;

  /** @internal */
  constructor(private readonly ws: WSLike) {
    ws.addEventListener("message", (ev: any) => {
      const d = ev.data;
      if (typeof d === "string") {
        try {
          const m = JSON.parse(d);
          if (m && m.exit) this.exit = camel<ExitInfo>(m.exit);
        } catch {
          // not ours
        }
        return;
      }
      const b = d instanceof ArrayBuffer ? new Uint8Array(d) : new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
      this.push(b);
    });
    ws.addEventListener("close", () => this.end());
    ws.addEventListener("error", () => this.end());
  }

  private push(v: Uint8Array | null): void {
    const w = this.waiters.shift();
    if (w) w(v);
    else this.queue.push(v);
  }

  private end(): void {
    if (this.closed) return;
    this.closed = true;
    this.push(null);
  }

  /** Send input bytes (or text, as UTF-8) to the command. */
  send(data: Data): void {
    this.ws.send(toBytes(data));
  }

  /** Resize the command's terminal (PTY commands). */
  resize(cols: number, rows: number): void {
    this.ws.send(JSON.stringify({ resize: { cols, rows } }));
  }

  /** The next output bytes, or null at the end. */
  recv(): Promise<Uint8Array | null> {
    if (this.queue.length) {
      const v = this.queue.shift()!;
      if (v === null) this.queue.unshift(null); // stays at the end
      return Promise.resolve(v);
    }
    if (this.closed) return Promise.resolve(null);
    return new Promise((r) => this.waiters.push(r));
  }

  /** The output bytes, until the command ends or the connection closes. */
  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    for (;;) {
      const b = await this.recv();
      if (b === null) return;
      yield b;
    }
  }

  /** Close the connection; the command goes on. */
  close(): void {
    this.ws.close(1000);
  }
}

/** @internal */
export async function openAttachment(client: Client, sandboxId: string, commandId: string, opts: AttachOptions = {}): Promise<Attachment> {
  const signal = opts.signal;
  const cancelled = () => new Cancelled(`attach to ${commandId}: cancelled`, null, 0);
  if (signal?.aborted) throw cancelled();
  const path = commandPath(sandboxId, commandId) + "/attach";
  const base = client.url.replace(/^http/, "ws") + path;
  const after = `after=${opts.after ?? 0}`;
  const WsNode = await loadWs();
  let ws: WSLike;
  let failed: Promise<never> | null = null;
  if (WsNode) {
    let url = `${base}?${after}`;
    const headers: Record<string, string> = {};
    if (opts.ticket) url += `&ticket=${encodeURIComponent((await client.createTicket(path)).ticket)}`;
    else headers.Authorization = "Bearer " + client.apiKey;
    const sock = new WsNode(url, { headers, maxPayload: 1 << 24 });
    failed = new Promise<never>((_, reject) => {
      sock.on("unexpected-response", (_req: unknown, res: any) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () => reject(errorFrom(res.statusCode, body)));
        res.on("error", () => reject(errorFrom(res.statusCode, body)));
        sock.terminate();
      });
    });
    failed.catch(() => {});
    ws = sock;
  } else {
    // Browsers (and a Node without `ws`): the global WebSocket cannot
    // send headers, so the attach is opened with a ticket.
    const G = (globalThis as any).WebSocket;
    if (!G) throw new CoveError("attach needs a WebSocket: install the `ws` package on Node");
    const t = await client.createTicket(path);
    ws = new G(`${base}?${after}&ticket=${encodeURIComponent(t.ticket)}`);
  }
  ws.binaryType = "arraybuffer";
  const a = new Attachment(ws);
  const opened = new Promise<void>((resolve, reject) => {
    ws.addEventListener("open", () => resolve());
    ws.addEventListener("error", (ev: any) => reject(new Unavailable(`attach to ${commandId} failed: ${ev?.message ?? "WebSocket error"}`)));
    ws.addEventListener("close", (ev: any) => reject(new Unavailable(`attach to ${commandId} closed before it opened (${ev?.code ?? ""})`)));
  });
  let aborted: Promise<never> | null = null;
  if (signal) {
    aborted = new Promise<never>((_, reject) => {
      signal.addEventListener("abort", () => { ws.close(1000); reject(cancelled()); }, { once: true });
    });
    aborted.catch(() => {});
  }
  await Promise.race([opened, ...(failed ? [failed] : []), ...(aborted ? [aborted] : [])]);
  return a;
}
