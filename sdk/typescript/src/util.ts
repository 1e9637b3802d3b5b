// Helpers that need no I/O: bytes, base64, digests, paths.

import { DigestMismatch } from "./errors.js";

const enc = new TextEncoder();

export type Data = Uint8Array | ArrayBuffer | string;

export function toBytes(data: Data): Uint8Array {
  if (typeof data === "string") return enc.encode(data);
  if (data instanceof Uint8Array) return data;
  return new Uint8Array(data);
}

export function b64decode(s: string): Uint8Array {
  if (typeof Buffer !== "undefined") return new Uint8Array(Buffer.from(s, "base64"));
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function b64encode(b: Uint8Array): string {
  if (typeof Buffer !== "undefined") return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("base64");
  let bin = "";
  for (let i = 0; i < b.length; i++) bin += String.fromCharCode(b[i]);
  return btoa(bin);
}

export async function sha256(b: Uint8Array): Promise<Uint8Array> {
  // Browsers and Node 20 have Web Crypto as a global; older Node has it
  // in node:crypto.
  const subtle: SubtleCrypto = globalThis.crypto?.subtle ?? (await import("node:crypto")).webcrypto.subtle as SubtleCrypto;
  return new Uint8Array(await subtle.digest("SHA-256", b as Uint8Array<ArrayBuffer>));
}

export async function reprDigest(b: Uint8Array): Promise<string> {
  return "sha-256=:" + b64encode(await sha256(b)) + ":";
}

/** The sha-256 of a Repr-Digest header, or null when it has none. */
export function parseDigest(value: string): Uint8Array | null {
  for (const item of value.split(",")) {
    const i = item.indexOf("=");
    if (i < 0) continue;
    if (item.slice(0, i).trim().toLowerCase() !== "sha-256") continue;
    const v = item.slice(i + 1).trim();
    if (v.length >= 2 && v.startsWith(":") && v.endsWith(":")) return b64decode(v.slice(1, -1));
  }
  return null;
}

export async function checkDigest(path: string, data: Uint8Array, header: string | null): Promise<Uint8Array> {
  const want = parseDigest(header ?? "");
  if (!want) throw new DigestMismatch(`download of ${path} has no sha-256 Repr-Digest; refusing unchecked bytes`);
  const got = await sha256(data);
  if (got.length !== want.length || got.some((x, i) => x !== want[i])) {
    throw new DigestMismatch(`download of ${path}: the bytes' sha-256 is not the one the server announced`);
  }
  return got;
}

export function versionOf(etag: string | null): string {
  return (etag ?? "").trim().replace(/^W\//, "").replace(/^"|"$/g, "");
}

export const esc = encodeURIComponent;

export function sandboxPath(ref: string): string {
  return "/v1/sandboxes/" + esc(ref);
}

export function commandPath(ref: string, cid: string): string {
  return sandboxPath(ref) + "/commands/" + esc(cid);
}

export function dropUndefined<T extends Record<string, unknown>>(d: T): Partial<T> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(d)) if (v !== undefined && v !== null) out[k] = v;
  return out as Partial<T>;
}

/** Wait ms milliseconds, or until signal fires (then rejects with its reason). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The seconds of a Retry-After header (a number of seconds or an HTTP
 * date), or undefined when there is none. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (!value) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, (t - Date.now()) / 1000);
}

/** n random bytes as hex. */
export function randomHex(n: number): string {
  const b = new Uint8Array(n);
  globalThis.crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** resp with a body whose read errors go through failure, so that a
 * connection cut while the body comes is the SDK's own error too. */
export function wrapBody(resp: Response, failure: (e: unknown) => Error): Response {
  if (!resp.body || resp.status === 204 || resp.status === 205 || resp.status === 304) return resp;
  const reader = resp.body.getReader();
  const body = new ReadableStream<Uint8Array>({
    async pull(ctl) {
      try {
        const { value, done } = await reader.read();
        if (done) ctl.close();
        else ctl.enqueue(value);
      } catch (e) {
        ctl.error(failure(e));
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
  return new Response(body, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
}

/** The wire's maps: their keys are the user's, never renamed. */
const MAPS = new Set(["labels", "env", "secrets", "details", "data", "metadata"]);

function rename(v: unknown, name: (k: string) => string): unknown {
  if (Array.isArray(v)) return v.map((x) => rename(x, name));
  if (v === null || typeof v !== "object" || v instanceof Uint8Array) return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    const n = name(k);
    out[n] = MAPS.has(n) || MAPS.has(k) ? x : rename(x, name);
  }
  return out;
}

/** A wire object with its field names in camelCase (exit_code → exitCode),
 * the keys of maps (labels, env, secrets, details, data) kept. */
export function camel<T = unknown>(v: unknown): T {
  return rename(v, (k) => k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase())) as T;
}

/** An object of camelCase fields as the wire has it (exitCode → exit_code). */
export function snake<T = unknown>(v: unknown): T {
  return rename(v, (k) => k.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase())) as T;
}

/** Split a byte stream into lines (without their "\n"). */
export async function* lines(body: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = body.getReader();
  let buf = new Uint8Array(0);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const joined = new Uint8Array(buf.length + value.length);
      joined.set(buf);
      joined.set(value, buf.length);
      let start = 0;
      for (let i = 0; i < joined.length; i++) {
        if (joined[i] === 0x0a) {
          yield joined.subarray(start, i);
          start = i + 1;
        }
      }
      buf = joined.slice(start);
    }
    if (buf.length) yield buf;
  } finally {
    reader.cancel().catch(() => {});
  }
}
