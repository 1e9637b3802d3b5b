// The console's connection to the API: the key (sessionStorage, never a
// URL) and a client of the TypeScript SDK built on it. A 401 signs out.
import { Client, CoveError, Sandbox } from "@cove-dev/sdk";
import type { SandboxInfo } from "@cove-dev/sdk";

const KEY = "cove.key";
let onSignOut: () => void = () => {};

export function key(): string | null {
  return sessionStorage.getItem(KEY);
}

export function setKey(k: string | null) {
  if (k) sessionStorage.setItem(KEY, k);
  else sessionStorage.removeItem(KEY);
  cached = null;
}

/** whenSignedOut names what a 401 does (the router's sign-out). */
export function whenSignedOut(f: () => void) {
  onSignOut = f;
}

let cached: Client | null = null;

/** sdk is the SDK client for the signed-in key. */
export function sdk(): Client {
  if (cached && cached.apiKey === key()) return cached;
  cached = new Client({
    url: location.origin,
    apiKey: key() ?? "-",
    fetch: async (input, init) => {
      const r = await fetch(input, init);
      if (r.status === 401) queueMicrotask(() => onSignOut());
      return r;
    },
  });
  return cached;
}

export { CoveError };

/** sandboxOf is the SDK's handle on a sandbox the page has already read
 * (no second read to act on it). */
export function sandboxOf(info: SandboxInfo): Sandbox {
  return new Sandbox(sdk(), info);
}

/** status is an error's HTTP status, 0 when it did not come from an answer. */
export function status(x: unknown): number {
  return x instanceof CoveError ? x.status : 0;
}

/** api makes a call the SDK has no method for; errors carry the API's message. */
export function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  return sdk().json<T>({ method, path, json: body });
}

/** events calls on() for each event of the team's stream (fetch, so that
 * the key goes in a header), and follows on after a break. */
export function events(on: (type: string, data: any) => void, opts: { sandbox?: string } = {}): () => void {
  const ctl = new AbortController();
  (async () => {
    let after = "";
    while (!ctl.signal.aborted) {
      try {
        for await (const e of sdk().streamEvents({ sandbox: opts.sandbox, after: after || undefined, signal: ctl.signal })) {
          after = (e as any).id ?? after;
          on((e as any).type, e);
        }
      } catch {
        if (ctl.signal.aborted) return;
      }
      await new Promise((r) => setTimeout(r, 2000));
    }
  })();
  return () => ctl.abort();
}
