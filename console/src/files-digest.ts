// Checking downloaded bytes against the sha-256 the server announced in
// Repr-Digest (RFC 9530), with the browser's WebCrypto where the page has
// it (a secure context: https or loopback) and @noble/hashes where it does
// not (plain http on any other host), so verification works on any origin.

import { sha256 as nobleSha256 } from "@noble/hashes/sha2.js";

export interface Verdict {
  /** The bytes' sha-256 is the one announced. */
  ok: boolean;
  /** The bytes' sha-256, hex. */
  hex: string;
  /** Why not, when not. */
  why: string;
}

function b64bytes(s: string): Uint8Array | null {
  try {
    return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}

/** announced is the sha-256 of a Repr-Digest header, or null without one. */
export function announced(header: string | null): Uint8Array | null {
  for (const item of (header ?? "").split(",")) {
    const i = item.indexOf("=");
    if (i < 0 || item.slice(0, i).trim().toLowerCase() !== "sha-256") continue;
    const v = item.slice(i + 1).trim();
    if (v.length >= 2 && v.startsWith(":") && v.endsWith(":")) return b64bytes(v.slice(1, -1));
  }
  return null;
}

export async function sha256(data: Uint8Array): Promise<Uint8Array> {
  const subtle = globalThis.crypto?.subtle;
  if (subtle) return new Uint8Array(await subtle.digest("SHA-256", data as Uint8Array<ArrayBuffer>));
  return nobleSha256(data);
}

export function hex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

export function b64(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i++) s += String.fromCharCode(b[i]);
  return btoa(s);
}

/** verify checks data against a Repr-Digest header. */
export async function verify(data: Uint8Array, header: string | null): Promise<Verdict> {
  const got = await sha256(data);
  const want = announced(header);
  if (!want) return { ok: false, hex: hex(got), why: "the server announced no sha-256" };
  const ok = want.length === got.length && want.every((x, i) => x === got[i]);
  return { ok, hex: hex(got), why: ok ? "" : "the bytes' sha-256 is not the one the server announced" };
}
