// The cove client: sandboxes, commands, files, assets, previews, events,
// secrets, teams and tickets, over the platform's fetch. API fields keep the API's own names
// (snake_case); what only the SDK adds (wait, ifVersion, after, …) is
// camelCase.

import { createParser } from "eventsource-parser";

import { Attachment, AttachOptions, openAttachment } from "./attach.js";
import {
  Cancelled, Conflict, CoveError, DeadlineExceeded, InvalidArgument, NotFound, Unavailable, errorFrom, transportError,
} from "./errors.js";
import type {
  Admission, ArchiveResult, Asset, Chunk, CommandInfo, CommandResult, CreateCommandRequest, CreateOptions,
  CreatePreviewRequest, CreateTeamResponse, CreateWebhookRequest, CreateWebhookResponse, SaveAssetRequest, Delivery, Event, FileEntry, FileEvent, Image, ImageSettings, KeyResponse, Metrics,
  NetworkView, Page, Preview, SandboxInfo, Schemas, SandboxState, SandboxUsage, Secret, Snapshot, Team, TeamMe, Template, Ticket, Volume,
  UpdateSandboxRequest, UpdateTeamRequest, UsageReport, Webhook, Workload, WorkloadOptions, WorkloadState,
} from "./types.js";
import {
  Data, b64decode, b64encode, camel, checkDigest, commandPath, dropUndefined, esc, lines, parseDigest, parseRetryAfter,
  randomHex, reprDigest, sandboxPath, sleep, snake, toBytes, versionOf, wrapBody,
} from "./util.js";

export const DEFAULT_URL = "http://127.0.0.1:7070";

/** How often a broken stream is resumed before giving up, in a row. */
export const STREAM_RETRIES = 8;

const LASTED_MS = 10_000;

const dec = new TextDecoder();

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name] || undefined;
}

type Params = Record<string, string | number | boolean | string[] | undefined | null>;

/** How to read output: the records after seq `after` (default 0), and
 * whether to follow a command still running (default true). signal ends
 * the iteration (Cancelled); timeoutMs bounds each connection. */
export interface OutputOptions extends CallOptions {
  after?: number;
  follow?: boolean;
}

/** What every call takes besides its own options. */
export interface CallOptions {
  /** Gives the call up (Cancelled) when it fires. */
  signal?: AbortSignal;
  /** The most time the call may take in all, retries included, in
   * milliseconds (DeadlineExceeded past it); 0 means no limit. Default:
   * the client's timeoutMs, plus what the call asks the server to wait. */
  timeoutMs?: number;
}

interface Req {
  method: string;
  path: string;
  params?: Params;
  json?: unknown;
  /** A function body opens the stream afresh for each try (a file read
   * again from its start), so the call can be retried as one with bytes
   * can; a ReadableStream is sent once. */
  body?: Uint8Array | ReadableStream<Uint8Array> | (() => Promise<ReadableStream<Uint8Array>>);
  headers?: Record<string, string>;
  call?: CallOptions;
  /** An Idempotency-Key to send; with key: "auto" one is made for the call
   * unless call gives none, and the call may then be retried. */
  key?: string;
  /** A stream read as long as it lasts: no default timeout. */
  stream?: boolean;
  /** How long the server is asked to wait before it answers, in ms: added
   * to the default timeout. */
  waitMs?: number;
}

/** The methods that change nothing, or the same thing however often. */
const IDEMPOTENT = new Set(["GET", "HEAD", "PUT", "DELETE"]);

export interface ClientOptions {
  /** The server, e.g. http://127.0.0.1:7070; default COVE_URL. */
  url?: string;
  /** An API key; default COVE_API_KEY. */
  apiKey?: string;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
  /** The default timeout of a call in milliseconds (0: none); default
   * 60 000. A call that asks the server to wait gets that time on top. */
  timeoutMs?: number;
  /** How many times a call that may be retried is tried again after a 429,
   * a 503, a 409 with Retry-After or a failure to reach the server;
   * default 5 (0: never). */
  maxRetries?: number;
  /** The most time a call may spend waiting between retries, in all, in
   * milliseconds; default 60 000. */
  maxRetryMs?: number;
}

/** A cove client. url and apiKey default to COVE_URL and COVE_API_KEY
 * where the platform has environment variables (Node).
 *
 * Calls that change nothing, and calls that carry an Idempotency-Key (the
 * client adds one to every call the API takes one on), are retried with
 * backoff and jitter on 429, 503, 409 with Retry-After and failures to
 * reach the server, waiting at least what Retry-After says. Every failure
 * is a CoveError. */
export class Client {
  readonly url: string;
  /** @internal */
  readonly apiKey: string;
  private readonly _fetch: typeof fetch;
  /** @internal */
  readonly timeoutMs: number;
  private readonly maxRetries: number;
  private readonly maxRetryMs: number;

  /** A client of the server at opts.url (COVE_URL) with opts.apiKey
   * (COVE_API_KEY); InvalidArgument without a key. */
  constructor(opts: ClientOptions = {}) {
    const url = opts.url || env("COVE_URL") || DEFAULT_URL;
    const key = opts.apiKey || env("COVE_API_KEY") || "";
    if (!key) throw new InvalidArgument("no API key: pass apiKey or set COVE_API_KEY");
    this.url = url.replace(/\/+$/, "");
    this.apiKey = key;
    this._fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.timeoutMs = opts.timeoutMs ?? 60_000;
    this.maxRetries = opts.maxRetries ?? 5;
    this.maxRetryMs = opts.maxRetryMs ?? 60_000;
  }

  // -- plumbing --

  /** @internal Send a request, retried where it may be, and answer the
   * response of a 2xx; any other outcome throws a CoveError. The timeout
   * and signal keep covering the body while the caller reads it. */
  async send(r: Req): Promise<Response> {
    const u = new URL(this.url + r.path);
    for (const [k, v] of Object.entries(r.params ?? {})) {
      if (v === undefined || v === null || v === "") continue;
      if (Array.isArray(v)) for (const x of v) u.searchParams.append(k, x);
      else u.searchParams.set(k, String(v));
    }
    const requestId = "req_" + randomHex(12);
    const headers: Record<string, string> = {
      Authorization: "Bearer " + this.apiKey, "X-Request-Id": requestId, ...(r.headers ?? {}),
    };
    if (r.key === "auto") headers["Idempotency-Key"] = "idk_" + randomHex(16);
    else if (r.key) headers["Idempotency-Key"] = r.key;
    const init: RequestInit & { duplex?: "half" } = { method: r.method, headers };
    let streamed = false;
    if (r.json !== undefined) {
      init.body = JSON.stringify(r.json);
      headers["Content-Type"] = "application/json";
    } else if (r.body instanceof Uint8Array) {
      init.body = r.body as Uint8Array<ArrayBuffer>;
    } else if (typeof r.body === "function") {
      // Opened for each try, below.
      init.duplex = "half";
    } else if (r.body !== undefined) {
      // A streamed body: fetch sends it as it is read (chunked), once.
      init.body = r.body;
      init.duplex = "half";
      streamed = true;
    }
    const what = `${r.method} ${r.path}`;
    const timeoutMs = r.call?.timeoutMs ?? (r.stream ? 0 : this.timeoutMs + (r.waitMs ?? 0));
    const deadline = timeoutMs > 0 ? AbortSignal.timeout(timeoutMs) : undefined;
    const user = r.call?.signal;
    const signals = [user, deadline].filter((x): x is AbortSignal => !!x);
    init.signal = signals.length === 0 ? undefined : signals.length === 1 ? signals[0] : AbortSignal.any(signals);
    const failure = (e: unknown): CoveError => {
      if (e instanceof CoveError) return e;
      let err: CoveError;
      if (user?.aborted) err = new Cancelled(`${what}: cancelled`, null, 0, { cause: e });
      else if (deadline?.aborted) err = new DeadlineExceeded(`${what}: no answer within ${timeoutMs} ms`, null, 0, { cause: e });
      else return transportError(e, what, requestId);
      err.requestId = requestId;
      return err;
    };
    const retryable = !streamed && (IDEMPOTENT.has(r.method) || !!headers["Idempotency-Key"]);
    const began = Date.now();
    for (let attempt = 0; ; attempt++) {
      let err: CoveError;
      let retryAfter: number | undefined;
      let again: boolean;
      try {
        if (typeof r.body === "function") init.body = await r.body();
        const resp = await this._fetch(u, init);
        if (resp.status < 300) return wrapBody(resp, failure);
        const text = await resp.text();
        err = errorFrom(resp.status, text, resp.headers.get("X-Request-Id") || requestId);
        retryAfter = parseRetryAfter(resp.headers.get("Retry-After"));
        again = resp.status === 429 || resp.status === 503 || (resp.status === 409 && retryAfter !== undefined);
      } catch (e) {
        err = failure(e);
        again = err instanceof Unavailable && err.status === 0;
      }
      if (typeof r.body === "function" && init.body instanceof ReadableStream) {
        // This try's file is let go of; the next opens its own.
        await init.body.cancel().catch(() => {});
      }
      if (!again || !retryable || attempt >= this.maxRetries) throw err;
      // Full jitter on an exponential step, and never sooner than the
      // server asked.
      const step = Math.min(250 * 2 ** attempt, 8_000);
      const delay = Math.max(retryAfter !== undefined ? retryAfter * 1000 : 0, step / 2 + Math.random() * (step / 2));
      const spent = Date.now() - began;
      if (spent + delay > this.maxRetryMs || (timeoutMs > 0 && spent + delay >= timeoutMs)) throw err;
      try {
        await sleep(delay, init.signal ?? undefined);
      } catch (e) {
        throw failure(e);
      }
    }
  }

  /** @internal The decoded JSON body of a request, as the wire has it. */
  async json<T = any>(r: Req): Promise<T> {
    const resp = await this.send(r);
    const text = await resp.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** @internal A request whose JSON body is written in camelCase: the
   * body is sent in snake_case and the answer read back in camelCase. */
  async call<T = any>(r: Req): Promise<T> {
    if (r.json !== undefined) r = { ...r, json: snake(r.json) };
    return camel(await this.json(r)) as T;
  }

  /** @internal The NDJSON output records at path (a command's or a
   * workload's) after seq `after`, resumed after a dropped connection.
   * started, when given, is awaited when the server answers Conflict (no
   * output yet) while following: it waits until there is some, or throws. */
  async *readOutput(path: string, what: string, opts: OutputOptions,
    started?: () => Promise<void>): AsyncGenerator<Chunk> {
    const follow = opts.follow ?? true;
    let seq = opts.after ?? 0;
    let failures = 0;
    for (;;) {
      const began = Date.now();
      try {
        const resp = await this.send({
          method: "GET", path, params: { after: seq, follow: follow ? "true" : undefined }, stream: true, call: opts,
        });
        for await (const raw of lines(resp.body!)) {
          const text = dec.decode(raw).trim();
          if (!text) continue;
          const d = JSON.parse(text);
          const ch: Chunk = {
            seq: d.seq ?? 0, stream: d.stream ?? "", data: d.data ? b64decode(d.data) : new Uint8Array(0),
            type: d.type ?? "", exitCode: d.exit_code ?? null, signal: d.signal ?? "", timedOut: !!d.timed_out,
          };
          if (ch.type !== "exit" && ch.seq <= seq) continue;
          seq = ch.seq;
          failures = 0;
          yield ch;
          if (ch.type === "exit") return;
        }
        if (!follow) return;
      } catch (e) {
        if (e instanceof Conflict && follow && started) {
          await started();
          continue;
        }
        // A cut connection is resumed; anything else (an error answer, a
        // cancel, a timeout) ends the iteration.
        if (!(e instanceof Unavailable && e.status === 0)) throw e;
      }
      // A connection that lasted (a long silence ended by a timeout on the
      // way) is not a failure in a row.
      if (Date.now() - began > LASTED_MS) failures = 0;
      failures++;
      if (failures > STREAM_RETRIES) {
        throw new Unavailable(`the output stream of ${what} broke ${failures} times in a row, last after seq ${seq}`);
      }
      try {
        await sleep(Math.min(50 * 2 ** failures, 5000), opts.signal);
      } catch (e) {
        throw new Cancelled(`output of ${what}: cancelled`, null, 0, { cause: e });
      }
    }
  }

  // -- sandboxes --

  /** Create a sandbox, and wait until it runs unless wait is false.
   *
   * It carries an Idempotency-Key (opts.idempotencyKey, or one made for
   * the call), so that a retry after a lost answer finds the sandbox the
   * first attempt made instead of making a second.
   *
   * @example
   * ```ts
   * await using sb = await client.create({ memoryMib: 1024, labels: { job: "ci" } });
   * ```
   */
  async create(fields: CreateOptions = {}, opts: { wait?: boolean; idempotencyKey?: string } & CallOptions = {}): Promise<Sandbox> {
    const { cpus, memoryMib, diskMib, ...rest } = fields;
    const res = dropUndefined({ cpus, memoryMib, diskMib, ...(fields.resources ?? {}) });
    const body = dropUndefined({ ...rest, resources: Object.keys(res).length ? res : undefined });
    const info = await this.call<SandboxInfo>({
      method: "POST", path: "/v1/sandboxes", params: { wait: opts.wait === false ? undefined : "running" }, json: body,
      key: opts.idempotencyKey ?? "auto", call: opts, waitMs: opts.wait === false ? 0 : 300_000,
    });
    return new Sandbox(this, info);
  }

  /** A sandbox by ID or name.
   *
   * @example
   * ```ts
   * const sb = await client.get("build"); // by name, after a reconnect
   * if (sb.info.state === "asleep") await sb.wake();
   * ```
   */
  async get(ref: string, opts: CallOptions = {}): Promise<Sandbox> {
    return new Sandbox(this, await this.call<SandboxInfo>({ method: "GET", path: sandboxPath(ref), call: opts }));
  }

  /** Every sandbox of the team (newest first), page after page. */
  async *list(opts: { state?: string | string[]; labels?: Record<string, string>; limit?: number } & CallOptions = {}): AsyncGenerator<SandboxInfo> {
    let cursor = "";
    for (;;) {
      const page = await this.listPage({ ...opts, cursor });
      yield* page.items;
      if (!page.nextCursor) return;
      cursor = page.nextCursor;
    }
  }

  /** One page of sandboxes. */
  async listPage(opts: { state?: string | string[]; labels?: Record<string, string>; limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<SandboxInfo>> {
    const state = opts.state === undefined ? undefined : Array.isArray(opts.state) ? opts.state : [opts.state];
    const label = opts.labels ? Object.entries(opts.labels).map(([k, v]) => `${k}=${v}`) : undefined;
    const d = await this.call({
      method: "GET", path: "/v1/sandboxes", params: { limit: opts.limit ?? 100, state, label, cursor: opts.cursor }, call: opts,
    });
    return { items: d?.items ?? [], nextCursor: d?.nextCursor ?? "" };
  }

  // -- events --

  /** One page of the team's events, oldest first. */
  async events(opts: { sandbox?: string; types?: string[]; after?: string; limit?: number } & CallOptions = {}): Promise<Page<Event>> {
    const d = await this.call({
      method: "GET", path: "/v1/events", call: opts,
      params: { limit: opts.limit ?? 100, sandbox: opts.sandbox, type: opts.types, after: opts.after },
    });
    return { items: d?.items ?? [], nextCursor: d?.nextCursor ?? "" };
  }

  /** Follow the team's events as they happen (server-sent events read
   * with fetch and the Authorization header), resuming after the last one
   * seen (Last-Event-ID) when the connection drops. Stop by breaking out
   * of the loop, or with signal (the iteration then ends). */
  async *streamEvents(opts: { sandbox?: string; types?: string[]; after?: string } & CallOptions = {}): AsyncGenerator<Event> {
    let last = opts.after ?? "";
    let failures = 0;
    for (;;) {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (last) headers["Last-Event-ID"] = last;
      const began = Date.now();
      const ctl = new AbortController();
      const onAbort = () => ctl.abort();
      opts.signal?.addEventListener("abort", onAbort);
      try {
        const resp = await this.send({
          method: "GET", path: "/v1/events/stream", params: { sandbox: opts.sandbox, type: opts.types }, headers,
          stream: true, call: { signal: ctl.signal, timeoutMs: opts.timeoutMs },
        });
        // The parser calls back per event; they are queued and yielded
        // between the body's pieces.
        const ready: Event[] = [];
        const parser = createParser({
          onEvent: (m) => {
            if (m.id) last = m.id;
            if (m.data) ready.push(camel<Event>(JSON.parse(m.data)));
          },
        });
        const reader = resp.body!.pipeThrough(new TextDecoderStream()).getReader();
        try {
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            parser.feed(value);
            while (ready.length) {
              const ev = ready.shift()!;
              last = ev.id || last;
              failures = 0;
              yield ev;
            }
          }
        } finally {
          reader.cancel().catch(() => {});
        }
        // The server ended the stream: follow on after a pause.
        if (!opts.signal?.aborted) await sleep(100);
      } catch (e) {
        if (opts.signal?.aborted) return;
        if (!(e instanceof Unavailable && e.status === 0)) throw e;
        if (Date.now() - began > LASTED_MS) failures = 0;
        failures++;
        if (failures > STREAM_RETRIES) throw e;
        await sleep(Math.min(100 * 2 ** failures, 5000));
      } finally {
        opts.signal?.removeEventListener("abort", onAbort);
        ctl.abort();
      }
      if (opts.signal?.aborted) return;
    }
  }

  // -- assets --

  /** Store an archive (tar or tar.gz) as an asset of the team. Bytes (or a
   * string) go with their sha-256 as Repr-Digest, for the server to check;
   * a ReadableStream is streamed as it is read, with the digest only when
   * opts.sha256 (hex) gives it. The same bytes are kept once: a second
   * upload answers the existing asset. */
  async createAsset(data: Data | ReadableStream<Uint8Array>, opts: { name?: string; sha256?: string } & CallOptions = {}): Promise<Asset> {
    const headers: Record<string, string> = { "Content-Type": "application/gzip" };
    let body: Uint8Array | ReadableStream<Uint8Array>;
    if (typeof ReadableStream !== "undefined" && data instanceof ReadableStream) {
      body = data;
      if (opts.sha256) headers["Repr-Digest"] = hexDigest(opts.sha256);
    } else {
      body = toBytes(data as Data);
      headers["Repr-Digest"] = await reprDigest(body);
    }
    return this.call({ method: "POST", key: "auto", call: opts, path: "/v1/assets", params: { name: opts.name }, body, headers });
  }

  /** Store a local tar or tar.gz file as an asset (Node only): hashed,
   * then streamed with its sha-256. */
  async createAssetFromFile(file: string, opts: { name?: string } & CallOptions = {}): Promise<Asset> {
    const { hashFile, fileStream } = await import("./nodefile.js");
    const sha256 = await hashFile(file);
    // Each try reads the file again, so a cut upload is retried.
    return this.call({
      method: "POST", key: "auto", call: opts, path: "/v1/assets", params: { name: opts.name }, body: () => fileStream(file),
      headers: { "Content-Type": "application/gzip", "Repr-Digest": hexDigest(sha256) },
    });
  }

  /** Store a local folder as an asset (Node only): packed as tar.gz
   * (modes, symlinks inside it and empty directories kept; exclude
   * patterns and a .coveignore file honoured) into a temporary file, then
   * streamed with its sha-256. */
  async createAssetFromDir(local: string, opts: { name?: string; exclude?: string[] } & CallOptions = {}): Promise<Asset> {
    return withPackedDir(local, opts.exclude ?? [], (body, digest) => this.call({
      method: "POST", key: "auto", call: opts, path: "/v1/assets", params: { name: opts.name }, body,
      headers: { "Content-Type": "application/gzip", "Repr-Digest": digest },
    }));
  }

  /** An asset of the team by ID. */
  getAsset(id: string, opts: CallOptions = {}): Promise<Asset> {
    return this.call({ method: "GET", call: opts, path: assetPath(id) });
  }

  /** Every asset of the team, page after page. */
  async *listAssets(opts: { limit?: number } & CallOptions = {}): AsyncGenerator<Asset> {
    let cursor = "";
    for (;;) {
      const page = await this.listAssetsPage({ ...opts, cursor });
      yield* page.items;
      if (!page.nextCursor) return;
      cursor = page.nextCursor;
    }
  }

  /** One page of the team's assets. */
  async listAssetsPage(opts: { limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<Asset>> {
    const d = await this.call({ method: "GET", call: opts, path: "/v1/assets", params: { limit: opts.limit ?? 100, cursor: opts.cursor } });
    return { items: d?.items ?? [], nextCursor: d?.nextCursor ?? "" };
  }

  /** An asset's bytes, checked against the server's sha-256 (DigestMismatch if not). */
  async readAsset(id: string, opts: CallOptions = {}): Promise<Uint8Array> {
    const resp = await this.send({ method: "GET", call: opts, path: assetPath(id) + "/content" });
    const data = new Uint8Array(await resp.arrayBuffer());
    await checkDigest(id, data, resp.headers.get("Repr-Digest"));
    return data;
  }

  /** Stream an asset's bytes into the local file (Node only), checked
   * against the server's sha-256; on a mismatch the file is removed and
   * DigestMismatch thrown. */
  async downloadAsset(id: string, local: string, opts: CallOptions = {}): Promise<void> {
    const { saveChecked } = await import("./nodefile.js");
    const resp = await this.send({ method: "GET", call: opts, path: assetPath(id) + "/content" });
    await saveChecked(id, resp.body!, parseDigest(resp.headers.get("Repr-Digest") ?? ""), local);
  }

  /** Delete an asset; sandboxes made from it keep their files. */
  async deleteAsset(id: string, opts: CallOptions = {}): Promise<void> {
    await this.call({ method: "DELETE", key: "auto", call: opts, path: assetPath(id) });
  }

  // -- snapshots --

  /** A snapshot of the team by ID or name. */
  getSnapshot(ref: string, opts: CallOptions = {}): Promise<Snapshot> {
    return this.call({ method: "GET", call: opts, path: snapshotPath(ref) });
  }

  /** Every snapshot of the team (of one sandbox when opts.sandbox is
   * set), page after page. */
  async *listSnapshots(opts: { sandbox?: string; limit?: number } & CallOptions = {}): AsyncGenerator<Snapshot> {
    let cursor = "";
    for (;;) {
      const d = await this.call({
        method: "GET", call: opts, path: "/v1/snapshots",
        params: { sandbox: opts.sandbox, limit: opts.limit ?? 100, cursor: cursor || undefined },
      });
      yield* (d?.items ?? []) as Snapshot[];
      if (!d?.nextCursor) return;
      cursor = d.nextCursor;
    }
  }

  /** Delete a snapshot; one that sandboxes still stand on throws
   * Conflict naming them. */
  async deleteSnapshot(ref: string, opts: CallOptions = {}): Promise<void> {
    await this.call({ method: "DELETE", key: "auto", call: opts, path: snapshotPath(ref) });
  }

  // -- volumes --

  /** Create a volume of the team: a disk of sizeMib (its quota) that
   * outlives sandboxes, mounted by several at once (create's volumes).
   *
   * @example
   * ```ts
   * const vol = await client.createVolume("cache", 1024);
   * const sb = await client.create({ volumes: [{ name: "cache", path: "/cache" }] });
   * ```
   */
  createVolume(name: string, sizeMib: number, opts: CallOptions = {}): Promise<Volume> {
    return this.call({ method: "POST", key: "auto", call: opts, path: "/v1/volumes", json: { name, size_mib: sizeMib } });
  }

  /** A volume of the team by ID or name. */
  getVolume(ref: string, opts: CallOptions = {}): Promise<Volume> {
    return this.call({ method: "GET", call: opts, path: volumePath(ref) });
  }

  /** Every volume of the team, page after page. */
  async *listVolumes(opts: { limit?: number } & CallOptions = {}): AsyncGenerator<Volume> {
    let cursor = "";
    for (;;) {
      const page = await this.listVolumesPage({ ...opts, cursor });
      yield* page.items;
      if (!page.nextCursor) return;
      cursor = page.nextCursor;
    }
  }

  /** One page of the team's volumes; nextCursor asks for the next. */
  async listVolumesPage(opts: { limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<Volume>> {
    const d = await this.call({
      method: "GET", call: opts, path: "/v1/volumes", params: { limit: opts.limit ?? 100, cursor: opts.cursor || undefined },
    });
    return { items: (d?.items ?? []) as Volume[], nextCursor: d?.nextCursor ?? "" };
  }

  /** Delete a volume and its files; one that sandboxes mount throws
   * Conflict naming them (its details). */
  async deleteVolume(ref: string, opts: CallOptions = {}): Promise<void> {
    await this.call({ method: "DELETE", key: "auto", call: opts, path: volumePath(ref) });
  }

  // -- workloads --

  /** Submit a batch run (fields.command, a shell string, or fields.argv);
   * it is queued until a node can place it. fields.image names an
   * imported image to run in instead of a template. */
  async submitWorkload(fields: WorkloadOptions, opts: { idempotencyKey?: string } & CallOptions = {}): Promise<Workload> {
    if ((fields.command === undefined) === (fields.argv === undefined)) {
      throw new InvalidArgument("give exactly one of command (a shell string) and argv (a list)");
    }
    return this.call({
      method: "POST", key: opts.idempotencyKey ?? "auto", call: opts, path: "/v1/workloads", json: dropUndefined({ ...fields }),
    });
  }

  /** A workload; with opts.wait (a state, e.g. "running" or "exited") the
   * server answers once it is in that state or has ended, or after
   * opts.timeout_s. */
  getWorkload(id: string, opts: { wait?: string; timeoutS?: number } & CallOptions = {}): Promise<Workload> {
    const params = opts.wait ? { wait: opts.wait, timeout_s: opts.timeoutS } : {};
    const waitMs = opts.wait ? (opts.timeoutS ?? 300) * 1000 : 0;
    return this.call({ method: "GET", call: opts, path: workloadPath(id), params, waitMs });
  }

  /** Wait until the workload is in state (default "exited") or has ended,
   * long-polling again until then. */
  async waitWorkload(id: string, state: WorkloadState = "exited", opts: { timeoutS?: number } & CallOptions = {}): Promise<Workload> {
    for (;;) {
      const w = await this.getWorkload(id, { ...opts, wait: state, timeoutS: opts.timeoutS ?? 300 });
      if (w.state === state || workloadDone(w)) return w;
    }
  }

  /** Every workload of the team (oldest first), page after page. */
  async *listWorkloads(opts: { state?: string | string[]; limit?: number } & CallOptions = {}): AsyncGenerator<Workload> {
    let cursor = "";
    for (;;) {
      const page = await this.listWorkloadsPage({ ...opts, cursor });
      yield* page.items;
      if (!page.nextCursor) return;
      cursor = page.nextCursor;
    }
  }

  /** One page of the team's workloads. */
  async listWorkloadsPage(opts: { state?: string | string[]; limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<Workload>> {
    const state = opts.state === undefined ? undefined : Array.isArray(opts.state) ? opts.state : [opts.state];
    const d = await this.call({
      method: "GET", call: opts, path: "/v1/workloads", params: { limit: opts.limit ?? 100, state, cursor: opts.cursor },
    });
    return { items: d?.items ?? [], nextCursor: d?.nextCursor ?? "" };
  }

  /** Cancel a queued or running workload; answered once its container is
   * gone (a workload that ended is answered as it is). */
  cancelWorkload(id: string, opts: CallOptions = {}): Promise<Workload> {
    return this.call({ method: "POST", key: "auto", call: opts, path: workloadPath(id) + "/cancel" });
  }

  /** A workload's output records after seq `after`, read as a command's:
   * in order, the exit last, resumed after a dropped connection. Following
   * a workload that has not started yet waits until it does (one that ends
   * without running throws Conflict). */
  workloadOutput(id: string, opts: OutputOptions = {}): AsyncGenerator<Chunk> {
    return this.readOutput(workloadPath(id) + "/output", id, opts, async () => {
      const w = await this.getWorkload(id, { wait: "running", timeoutS: 60, signal: opts.signal });
      if (workloadDone(w) && !w.startedAt) {
        throw new Conflict(`workload ${id} is ${w.state} and never ran: it has no output`, {}, 409);
      }
    });
  }

  /** A workload's recorded stdout, raw. */
  async workloadStdout(id: string, opts: CallOptions = {}): Promise<Uint8Array> {
    return new Uint8Array(await (await this.send({ method: "GET", call: opts, path: workloadPath(id) + "/stdout" })).arrayBuffer());
  }

  /** A workload's recorded stderr, raw. */
  async workloadStderr(id: string, opts: CallOptions = {}): Promise<Uint8Array> {
    return new Uint8Array(await (await this.send({ method: "GET", call: opts, path: workloadPath(id) + "/stderr" })).arrayBuffer());
  }

  // -- images --

  /** Import an image from an OCI image layout archive or a `docker save`
   * archive (bytes, or a ReadableStream sent as it is read) as the team's
   * image called opts.name. */
  async importImage(data: Uint8Array | ReadableStream<Uint8Array>, opts: { name: string; settings?: ImageSettings } & CallOptions): Promise<Image> {
    if (!opts.name) throw new InvalidArgument("an imported image needs a name");
    return this.call({
      method: "POST", key: "auto", call: opts, path: "/v1/images", body: data, headers: { "Content-Type": "application/x-tar" },
      params: { name: opts.name, settings: opts.settings ? JSON.stringify(opts.settings) : undefined },
    });
  }

  /** Import an image from a local archive file (Node only), streamed. */
  async importImageFromFile(file: string, opts: { name: string; settings?: ImageSettings } & CallOptions): Promise<Image> {
    if (!opts.name) throw new InvalidArgument("an imported image needs a name");
    const { fileStream } = await import("./nodefile.js");
    // Each try reads the file again, so a cut import is retried.
    return this.call({
      method: "POST", key: "auto", call: opts, path: "/v1/images", body: () => fileStream(file), headers: { "Content-Type": "application/x-tar" },
      params: { name: opts.name, settings: opts.settings ? JSON.stringify(opts.settings) : undefined },
    });
  }

  /** The images the team may see. */
  async images(opts: CallOptions = {}): Promise<Image[]> {
    return (await this.call({ method: "GET", call: opts, path: "/v1/images" }))?.items ?? [];
  }

  /** An image by ID or name. */
  getImage(ref: string, opts: CallOptions = {}): Promise<Image> {
    return this.call({ method: "GET", call: opts, path: imagePath(ref) });
  }

  /** Change an image's settings; those left out keep theirs. */
  updateImage(ref: string, settings: ImageSettings, opts: CallOptions = {}): Promise<Image> {
    return this.call({ method: "PATCH", key: "auto", call: opts, path: imagePath(ref), json: settings });
  }

  /** Delete an image no sandbox uses (Conflict while one does). */
  async deleteImage(ref: string, opts: CallOptions = {}): Promise<void> {
    await this.call({ method: "DELETE", key: "auto", call: opts, path: imagePath(ref) });
  }

  // -- secrets --

  /** Store a secret of the team (its value is never returned). */
  putSecret(name: string, value: string, opts: CallOptions = {}): Promise<Secret> {
    return this.call({ method: "PUT", call: opts, path: "/v1/secrets/" + esc(name), json: { value } satisfies Schemas["PutSecretRequest"] });
  }

  /** A secret's name and times. */
  getSecret(name: string, opts: CallOptions = {}): Promise<Secret> {
    return this.call({ method: "GET", call: opts, path: "/v1/secrets/" + esc(name) });
  }

  /** Every secret's name and times. */
  async listSecrets(opts: CallOptions = {}): Promise<Secret[]> {
    const out: Secret[] = [];
    let cursor = "";
    for (;;) {
      const d = await this.call({ method: "GET", call: opts, path: "/v1/secrets", params: { cursor } });
      out.push(...(d?.items ?? []));
      cursor = d?.nextCursor ?? "";
      if (!cursor) return out;
    }
  }

  /** Delete a secret; commands that had it keep their environment. */
  async deleteSecret(name: string, opts: CallOptions = {}): Promise<void> {
    await this.call({ method: "DELETE", key: "auto", call: opts, path: "/v1/secrets/" + esc(name) });
  }

  // -- webhooks --

  /** Registers a URL for the team's events; `secret` (whsec_...) is shown only here. */
  createWebhook(url: string, events?: string[], opts: CallOptions = {}): Promise<CreateWebhookResponse> {
    const body: CreateWebhookRequest = events && events.length ? { url, events } : { url };
    return this.call({ method: "POST", key: "auto", call: opts, path: "/v1/webhooks", json: body });
  }

  /** Every webhook of the team (without their secrets). */
  async listWebhooks(opts: CallOptions = {}): Promise<Webhook[]> {
    const out: Webhook[] = [];
    let cursor = "";
    for (;;) {
      const d = await this.call<Page<Webhook>>({ method: "GET", call: opts, path: "/v1/webhooks", params: { cursor } });
      out.push(...(d?.items ?? []));
      cursor = d?.nextCursor ?? "";
      if (!cursor) return out;
    }
  }

  /** A webhook by ID. */
  getWebhook(id: string, opts: CallOptions = {}): Promise<Webhook> {
    return this.call({ method: "GET", call: opts, path: "/v1/webhooks/" + esc(id) });
  }

  /** Delete a webhook; no more deliveries are made to it. */
  async deleteWebhook(id: string, opts: CallOptions = {}): Promise<void> {
    await this.call({ method: "DELETE", key: "auto", call: opts, path: "/v1/webhooks/" + esc(id) });
  }

  /** The webhook's latest deliveries, newest first, with their attempts. */
  async webhookDeliveries(id: string, limit = 100, opts: CallOptions = {}): Promise<Delivery[]> {
    const d = await this.call<Page<Delivery>>({ method: "GET", call: opts, path: "/v1/webhooks/" + esc(id) + "/deliveries", params: { limit: String(limit) } });
    return d?.items ?? [];
  }

  // -- teams, keys, tickets --

  /** A new team and its first API key (shown once). Admin only. */
  createTeam(name: string, opts: CallOptions = {}): Promise<CreateTeamResponse> {
    return this.call({ method: "POST", call: opts, path: "/v1/teams", json: { name } satisfies Schemas["CreateTeamRequest"] });
  }

  /** Every team (admin key). */
  async listTeams(opts: CallOptions = {}): Promise<Team[]> {
    return (await this.call<Page<Team>>({ method: "GET", call: opts, path: "/v1/teams" }))?.items ?? [];
  }

  /** A new API key for a team (shown once). */
  createKey(teamId: string, opts: CallOptions = {}): Promise<KeyResponse> {
    return this.call({ method: "POST", call: opts, path: "/v1/teams/" + esc(teamId) + "/keys" });
  }

  /** Revoke an API key: calls made with it fail from now on. */
  async revokeKey(keyId: string, opts: CallOptions = {}): Promise<void> {
    await this.call({ method: "DELETE", call: opts, path: "/v1/keys/" + esc(keyId) });
  }

  /** A single-use ticket for one attach path, for browser WebSockets. */
  createTicket(path: string, opts: CallOptions = {}): Promise<Ticket> {
    return this.call({ method: "POST", call: opts, path: "/v1/tickets", json: { path } satisfies Schemas["CreateTicketRequest"] });
  }

  /** The team's usage and cost (from and to: RFC 3339; group_by: "day" or
   * "sandbox"), its spend this month and its monthly limit. */
  usage(opts: { from?: string; to?: string; groupBy?: "day" | "sandbox" | string } & CallOptions = {}): Promise<UsageReport> {
    return this.call({ method: "GET", call: opts, path: "/v1/usage", params: { from: opts.from, to: opts.to, group_by: opts.groupBy } });
  }

  /** PATCH a team (admin key): admission, spend_limit_usd (a month's;
   * negative removes it), budget_alerts. */
  updateTeam(teamId: string, fields: UpdateTeamRequest, opts: CallOptions = {}): Promise<Team> {
    return this.call({ method: "PATCH", key: "auto", call: opts, path: "/v1/teams/" + esc(teamId), json: dropUndefined(fields) });
  }

  /** The key's own team: its admission flags and limits. */
  teamMe(opts: CallOptions = {}): Promise<TeamMe> {
    return this.call({ method: "GET", call: opts, path: "/v1/teams/me" });
  }

  /** Replace a team's admission flags, all four (admin key). */
  setAdmission(teamId: string, admission: Admission, opts: CallOptions = {}): Promise<Team> {
    return this.call({ method: "PATCH", key: "auto", call: opts, path: "/v1/teams/" + esc(teamId), json: { admission } satisfies UpdateTeamRequest });
  }

  /** The templates the team may use: status, progress, qualified. */
  async templates(opts: CallOptions = {}): Promise<Template[]> {
    return (await this.call<Page<Template>>({ method: "GET", call: opts, path: "/v1/templates" }))?.items ?? [];
  }

  /** The API's OpenAPI document (its schema is any JSON object). */
  openapi(opts: CallOptions = {}): Promise<Record<string, any>> {
    return this.json({ method: "GET", path: "/v1/openapi.json", call: opts });
  }
}

function workloadPath(id: string): string {
  return "/v1/workloads/" + esc(id);
}

function imagePath(ref: string): string {
  return "/v1/images/" + esc(ref);
}

/** Whether a workload has ended (exited, failed or cancelled). */
export function workloadDone(w: Workload): boolean {
  return w.state === "exited" || w.state === "failed" || w.state === "cancelled";
}

function assetPath(id: string): string {
  return "/v1/assets/" + esc(id);
}

function snapshotPath(ref: string): string {
  return "/v1/snapshots/" + esc(ref);
}

function volumePath(ref: string): string {
  return "/v1/volumes/" + esc(ref);
}

/** Run send with a local folder packed as tar.gz into a temporary file
 * (removed after): a function that opens the file's bytes as a stream,
 * once per try, and their Repr-Digest (Node only). */
async function withPackedDir<T>(local: string, exclude: string[], send: (body: () => Promise<ReadableStream<Uint8Array>>, digest: string) => Promise<T>): Promise<T> {
  const [{ packDirToFile }, { fileStream }, fs, os, path] = await Promise.all([
    import("./tar.js"), import("./nodefile.js"), import("node:fs/promises"), import("node:os"), import("node:path"),
  ]);
  const tmp = await fs.mkdtemp(path.join(os.tmpdir(), "cove-pack-"));
  try {
    const file = path.join(tmp, "folder.tar.gz");
    const sha256 = await packDirToFile(local, file, exclude);
    return await send(() => fileStream(file), hexDigest(sha256));
  } finally {
    await fs.rm(tmp, { recursive: true, force: true });
  }
}

function hexDigest(hex: string): string {
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) throw new InvalidArgument(`sha256 ${JSON.stringify(hex)} is not 64 hex digits`);
  const b = new Uint8Array(32);
  for (let i = 0; i < 32; i++) b[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return "sha-256=:" + b64encode(b) + ":";
}

/** The source of a sandbox that starts from an asset:
 * `client.create({ source: assetSource(asset) })`. */
export function assetSource(asset: Asset | string): { type: "asset"; assetId: string } {
  return { type: "asset", assetId: typeof asset === "string" ? asset : asset.id };
}

/** Whether a command may wake its sandbox. An asleep sandbox is woken
 * first (one going to sleep or waking is waited for) unless wake is false,
 * which fails with Conflict instead. */
export type WakeOption = { wake?: boolean };

/** The fields of POST …/commands besides the command string (argv: a
 * program and its arguments, run with no shell, instead of a string). */
export type CommandOptions = Omit<CreateCommandRequest, "command" | "stdin" | "pty" | "noOutputAlertS"> & WakeOption;

export type StartOptions = Omit<CreateCommandRequest, "command"> & WakeOption;

function commandBody(command: string | undefined, o: StartOptions): CreateCommandRequest {
  if ((command === undefined) === (o.argv === undefined)) {
    throw new InvalidArgument("give exactly one of command (a shell string) and argv (a list)");
  }
  return dropUndefined({
    command, argv: o.argv, cwd: o.cwd, env: o.env && Object.keys(o.env).length ? o.env : undefined,
    secrets: o.secrets && Object.keys(o.secrets).length ? o.secrets : undefined, timeoutS: o.timeoutS,
    stdin: o.stdin || undefined, user: o.user, pty: o.pty, noOutputAlertS: o.noOutputAlertS, tag: o.tag,
  });
}

/** A sandbox and what can be done in it. info is its last known state;
 * refresh() reads it again. */
export class Sandbox {
  readonly id: string;
  info: SandboxInfo;
  readonly files: Files;

  constructor(private readonly client: Client, info: SandboxInfo) {
    this.id = info.id;
    this.info = info;
    this.files = new Files(client, info.id);
  }

  private set(d: SandboxInfo): SandboxInfo {
    this.info = d;
    return d;
  }

  /** Read the sandbox's state again into info. */
  async refresh(opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.set(await this.client.call({ method: "GET", call: opts, path: sandboxPath(this.id) }));
  }

  /** Wait until the sandbox is in state (or a terminal one). */
  async wait(state: SandboxState, opts: { timeoutS?: number } & CallOptions = {}): Promise<SandboxInfo> {
    const timeoutS = opts.timeoutS ?? 300;
    return this.set(await this.client.call({
      method: "GET", call: opts, path: sandboxPath(this.id), params: { wait: state, timeout_s: timeoutS }, waitMs: timeoutS * 1000,
    }));
  }

  /** PATCH: idle_timeout_s, on_idle, max_lifetime_s, spend_limit_usd, network, labels.
   *
   * @example
   * ```ts
   * // Let the sandbox reach one API and nothing else.
   * await sb.update({ network: { allow: ["api.example.com"] } });
   * ```
   */
  async update(fields: UpdateSandboxRequest, opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.set(await this.client.call({ method: "PATCH", key: "auto", call: opts, path: sandboxPath(this.id), json: dropUndefined(fields) }));
  }

  /** Save the files and release compute; waits until asleep unless wait is false.
   *
   * @example
   * ```ts
   * await sb.sleep(); // files kept, no CPU billed
   * const again = await client.get(sb.id);
   * await again.wake();
   * ```
   */
  async sleep(opts: { wait?: boolean } & CallOptions = {}): Promise<SandboxInfo> {
    this.set(await this.client.call({ method: "POST", key: "auto", call: opts, path: sandboxPath(this.id) + "/sleep" }));
    return opts.wait === false ? this.info : this.wait("asleep", opts);
  }

  /** Wake an asleep sandbox with its files; waits until it runs unless
   * wait is false.
   *
   * @example
   * ```ts
   * const sb = await client.get("build");
   * await sb.wake(); // answered once it runs again
   * ```
   */
  async wake(opts: { wait?: boolean } & CallOptions = {}): Promise<SandboxInfo> {
    this.set(await this.client.call({ method: "POST", key: "auto", call: opts, path: sandboxPath(this.id) + "/wake" }));
    return opts.wait === false ? this.info : this.wait("running", opts);
  }

  /** Freeze the sandbox's files (running or asleep) into a snapshot of
   * the team; running commands go on.
   *
   * @example
   * ```ts
   * const snap = await sb.snapshot("deps-installed");
   * const other = await client.create({ source: { type: "snapshot", snapshotId: snap.id } });
   * ```
   */
  snapshot(name: string, opts: CallOptions = {}): Promise<Snapshot> {
    return this.client.call({ method: "POST", key: "auto", call: opts, path: sandboxPath(this.id) + "/snapshots", json: { name } });
  }

  /** Return the sandbox to a snapshot (ID or name): running commands end
   * as at a sleep; its ID, name, network and history stay. Waits until it
   * runs unless wait is false. */
  async restore(snapshot: string, opts: { wait?: boolean } & CallOptions = {}): Promise<SandboxInfo> {
    return this.set(await this.client.call({
      method: "POST", key: "auto", call: opts, path: sandboxPath(this.id) + "/restore",
      params: { wait: opts.wait === false ? undefined : "running" }, json: { snapshot_id: snapshot },
    }));
  }

  /** Make count new sandboxes from this one's files as they are now,
   * each independent; waits until they run unless wait is false.
   *
   * @example
   * ```ts
   * const tries = await sb.fork(5);
   * ```
   */
  async fork(count: number, opts: { names?: string[]; labels?: Record<string, string>; wait?: boolean } & CallOptions = {}): Promise<Sandbox[]> {
    const d = await this.client.call({
      method: "POST", key: "auto", call: opts, path: sandboxPath(this.id) + "/fork",
      params: { wait: opts.wait === false ? undefined : "running" },
      json: dropUndefined({ count, names: opts.names, labels: opts.labels }),
    });
    return ((d?.items ?? []) as SandboxInfo[]).map((info) => new Sandbox(this.client, info));
  }

  /** Terminate the sandbox: its processes stop and its files go. */
  async terminate(opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.set(await this.client.call({ method: "DELETE", key: "auto", call: opts, path: sandboxPath(this.id) }));
  }

  /** Terminates the sandbox when an `await using` block that holds it
   * ends; one already gone is left as it is.
   *
   * @example
   * ```ts
   * await using sb = await client.create();
   * const r = await sb.run("make test");
   * ```
   */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.terminate();
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
    }
  }

  /** The policy and what the sandbox tried to reach. */
  network(opts: CallOptions = {}): Promise<NetworkView> {
    return this.client.call({ method: "GET", call: opts, path: sandboxPath(this.id) + "/network" });
  }

  /** Resource samples and the gaps in them (from and to: RFC 3339; step:
   * seconds or a duration such as "1m").
   *
   * @example
   * ```ts
   * const m = await sb.metrics({ step: "1m" });
   * const spent = await sb.usage();
   * console.log(m.samples.length, "samples;", spent.costUsd, "USD so far");
   * ```
   */
  metrics(opts: { from?: string; to?: string; step?: string } & CallOptions = {}): Promise<Metrics> {
    return this.client.call({
      method: "GET", call: opts, path: sandboxPath(this.id) + "/metrics", params: { from: opts.from, to: opts.to, step: opts.step },
    });
  }

  /** What the sandbox used and cost, its spend limit and price per hour. */
  usage(opts: CallOptions = {}): Promise<SandboxUsage> {
    return this.client.call({ method: "GET", call: opts, path: sandboxPath(this.id) + "/usage" });
  }

  // -- previews --

  /** Publish a port over HTTP (visibility "private", the default, or
   * "public"; wake lets a request wake an asleep sandbox). A private
   * preview's token and one-time link are in this answer only. */
  async preview(port: number, opts: Omit<CreatePreviewRequest, "port"> & CallOptions = {}): Promise<Preview> {
    const body: CreatePreviewRequest = { port, visibility: opts.visibility, wake: opts.wake };
    // A private preview's answer holds its token, so the API takes no key
    // for it.
    const key = opts.visibility === "public" ? "auto" : undefined;
    return this.client.call<Preview>({ method: "POST", key, call: opts, path: sandboxPath(this.id) + "/previews", json: dropUndefined(body) });
  }

  /** The sandbox's previews (without tokens). */
  async previews(opts: CallOptions = {}): Promise<Preview[]> {
    const d = await this.client.call({ method: "GET", call: opts, path: sandboxPath(this.id) + "/previews" });
    return (d?.items ?? []) as Preview[];
  }

  /** Unpublish a preview. */
  async deletePreview(id: string, opts: CallOptions = {}): Promise<void> {
    await this.client.call({ method: "DELETE", key: "auto", call: opts, path: sandboxPath(this.id) + "/previews/" + esc(id) });
  }

  // -- assets --

  /** Save a folder of the sandbox as an asset of the team (the same bytes
   * as an existing asset answer that one). */
  saveAsset(path: string, opts: Omit<SaveAssetRequest, "path"> & CallOptions = {}): Promise<Asset> {
    const body: SaveAssetRequest = { path, name: opts.name };
    return this.client.call({ method: "POST", key: "auto", call: opts, path: sandboxPath(this.id) + "/assets", json: dropUndefined(body) });
  }

  // -- commands --

  /** Run a command to its end; its output comes back as text. An asleep
   * sandbox is woken first (one going to sleep or waking is waited for)
   * unless wake is false, which fails with Conflict instead.
   *
   * @example
   * ```ts
   * const r = await sb.run("npm test", { timeoutS: 600 });
   * if (r.exitCode !== 0) console.error(r.stderr);
   * ```
   */
  async run(command?: string, opts: CommandOptions & CallOptions = {}): Promise<CommandResult> {
    const d = await this.client.call({
      method: "POST", key: "auto", call: opts, path: sandboxPath(this.id) + "/commands",
      params: { wait: "true", wake: opts.wake === false ? "false" : undefined },
      waitMs: Math.min(opts.timeoutS ? opts.timeoutS * 1000 : 86_400_000, 86_400_000),
      json: commandBody(command, opts),
    });
    const info = (d?.command ?? {}) as CommandInfo;
    return {
      command: info, stdout: d?.stdout ?? "", stderr: d?.stderr ?? "", truncated: !!d?.truncated,
      exitCode: info.exitCode ?? null,
    };
  }

  /** Start a command and return at once; see Command. An asleep sandbox
   * is woken first, as by run, unless wake is false. */
  async start(command?: string, opts: StartOptions & CallOptions = {}): Promise<Command> {
    const d = await this.client.call<CommandInfo>({
      method: "POST", key: "auto", call: opts, path: sandboxPath(this.id) + "/commands",
      params: { wake: opts.wake === false ? "false" : undefined }, json: commandBody(command, opts),
    });
    return new Command(this.client, this.id, d);
  }

  /** A command of this sandbox by ID. */
  async command(commandId: string, opts: CallOptions = {}): Promise<Command> {
    const d = await this.client.call<CommandInfo>({ method: "GET", call: opts, path: commandPath(this.id, commandId) });
    return new Command(this.client, this.id, d);
  }

  /** One page of the sandbox's commands. */
  async commands(opts: { limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<CommandInfo>> {
    const d = await this.client.call({
      method: "GET", call: opts, path: sandboxPath(this.id) + "/commands", params: { limit: opts.limit ?? 100, cursor: opts.cursor },
    });
    return { items: d?.items ?? [], nextCursor: d?.nextCursor ?? "" };
  }
}

/** A started command: iterate its output (resumed after a dropped
 * connection), feed its stdin, signal it, wait for it. */
export class Command {
  readonly id: string;
  info: CommandInfo;

  constructor(private readonly client: Client, readonly sandboxId: string, info: CommandInfo) {
    this.id = info.id;
    this.info = info;
  }

  private get path(): string {
    return commandPath(this.sandboxId, this.id);
  }

  /** Output records after seq `after` in order, the exit last. A broken
   * connection is resumed from the last record seen, so nothing is lost
   * or repeated.
   *
   * @example
   * ```ts
   * const cmd = await sb.start("make build");
   * for await (const ch of cmd.output()) process.stdout.write(ch.data); // resumes after a cut
   * ```
   */
  output(opts: OutputOptions = {}): AsyncGenerator<Chunk> {
    return this.client.readOutput(this.path + "/output", this.id, opts);
  }

  /** Wait for the end; the output is read (and dropped) on the way. */
  async wait(opts: CallOptions = {}): Promise<CommandInfo> {
    for await (const ch of this.output({ signal: opts.signal })) if (ch.type === "exit") break;
    return this.refresh(opts);
  }

  /** Read the command's state again into info. */
  async refresh(opts: CallOptions = {}): Promise<CommandInfo> {
    this.info = await this.client.call<CommandInfo>({ method: "GET", call: opts, path: this.path });
    return this.info;
  }

  /** Append to the command's stdin (started with stdin: true); eof closes it. */
  async write(data: Data, opts: { eof?: boolean } & CallOptions = {}): Promise<void> {
    await this.client.call({
      method: "POST", call: opts, path: this.path + "/stdin", params: { eof: opts.eof ? "true" : undefined }, body: toBytes(data),
      headers: { "Content-Type": "application/octet-stream" },
    });
  }

  /** Close the command's stdin (EOF). */
  closeStdin(): Promise<void> {
    return this.write(new Uint8Array(0), { eof: true });
  }

  /** Signal the command's whole process group ("TERM", "KILL", "INT", …). */
  async signal(sig = "TERM", opts: CallOptions = {}): Promise<void> {
    await this.client.call({ method: "POST", key: "auto", call: opts, path: this.path + "/signal", json: { signal: sig } satisfies Schemas["SignalRequest"] });
  }

  /** The recorded stdout, raw. */
  async stdout(opts: CallOptions = {}): Promise<Uint8Array> {
    return new Uint8Array(await (await this.client.send({ method: "GET", call: opts, path: this.path + "/stdout" })).arrayBuffer());
  }

  /** The recorded stderr, raw. */
  async stderr(opts: CallOptions = {}): Promise<Uint8Array> {
    return new Uint8Array(await (await this.client.send({ method: "GET", call: opts, path: this.path + "/stderr" })).arrayBuffer());
  }

  /** A live connection to the command's terminal or pipes (WebSocket). On
   * Node it uses the optional `ws` package with the Authorization header;
   * in browsers the global WebSocket with a single-use ticket. */
  attach(opts: AttachOptions = {}): Promise<Attachment> {
    return openAttachment(this.client, this.sandboxId, this.id, opts);
  }
}

/** A whole file read: its bytes, version and sha-256 (checked). */
export class FileContent {
  /** @internal */
  constructor(readonly data: Uint8Array, readonly version: string, readonly sha256: Uint8Array) {}

  /** The bytes as UTF-8 text (a TypeError if they are not UTF-8). */
  get text(): string {
    return new TextDecoder("utf-8", { fatal: true }).decode(this.data);
  }
}

/** A sandbox's files. Paths are absolute inside the sandbox. */
export class Files {
  private readonly base: string;

  constructor(private readonly client: Client, sandboxId: string) {
    this.base = sandboxPath(sandboxId) + "/files";
  }

  /** The entries under path, depth levels down (default 1), every page. */
  async list(path: string, opts: { depth?: number } & CallOptions = {}): Promise<FileEntry[]> {
    const out: FileEntry[] = [];
    let cursor = "";
    for (;;) {
      const d = await this.client.call({
        method: "GET", call: opts, path: this.base, params: { path, depth: opts.depth ?? 1, limit: 1000, cursor },
      });
      out.push(...(d?.items ?? []));
      cursor = d?.nextCursor ?? "";
      if (!cursor) return out;
    }
  }

  /** One entry: its kind, size, mode, time and version (NotFound if none). */
  stat(path: string, opts: CallOptions = {}): Promise<FileEntry> {
    return this.client.call({ method: "GET", call: opts, path: this.base + "/stat", params: { path } });
  }

  /** Whether path exists. */
  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (e) {
      if (e instanceof NotFound) return false;
      throw e;
    }
  }

  /** The whole file, checked against the server's sha-256 (DigestMismatch if not). */
  async read(path: string, opts: CallOptions = {}): Promise<FileContent> {
    const resp = await this.client.send({ method: "GET", call: opts, path: this.base + "/content", params: { path } });
    const data = new Uint8Array(await resp.arrayBuffer());
    const digest = await checkDigest(path, data, resp.headers.get("Repr-Digest"));
    return new FileContent(data, versionOf(resp.headers.get("ETag")), digest);
  }

  /** The whole file as UTF-8 text, checked as read does.
   *
   * @example
   * ```ts
   * const report = JSON.parse(await sb.files.readText("/workspace/report.json"));
   * ```
   */
  async readText(path: string): Promise<string> {
    return (await this.read(path)).text;
  }

  /** Write a whole file atomically. With ifVersion it is written only if
   * the file is still at that version ("none": only if it does not exist),
   * else PreconditionFailed and nothing changes.
   *
   * @example
   * ```ts
   * await sb.files.write("/workspace/main.js", "console.log('hello')\n");
   * console.log((await sb.run("node /workspace/main.js")).stdout);
   * ```
   */
  async write(path: string, data: Data, opts: { ifVersion?: string; mode?: string } & CallOptions = {}): Promise<FileEntry> {
    const body = toBytes(data);
    const headers: Record<string, string> = {
      "Content-Type": "application/octet-stream", "Repr-Digest": await reprDigest(body),
    };
    if (opts.ifVersion === "none") headers["If-None-Match"] = "*";
    else if (opts.ifVersion) headers["If-Match"] = `"${opts.ifVersion}"`;
    return this.client.call({ method: "PUT", call: opts, path: this.base + "/content", params: { path, mode: opts.mode }, body, headers });
  }

  /** Replace texts: each old must occur exactly once, else Conflict and
   * nothing is written. */
  edit(path: string, edits: Array<{ old: string; new: string }>, opts: { ifVersion?: string } & CallOptions = {}): Promise<FileEntry> {
    const headers: Record<string, string> = opts.ifVersion ? { "If-Match": `"${opts.ifVersion}"` } : {};
    return this.client.call({ method: "PATCH", key: "auto", call: opts, path: this.base + "/content", params: { path }, json: { edits } satisfies Schemas["EditFileRequest"], headers });
  }

  /** Make a directory and its parents. */
  mkdir(path: string, opts: CallOptions = {}): Promise<FileEntry> {
    return this.client.call({ method: "POST", key: "auto", call: opts, path: this.base + "/mkdir", json: { path } satisfies Schemas["MkdirRequest"] });
  }

  /** Move or rename; an existing target is Conflict unless overwrite. */
  move(from: string, to: string, opts: { overwrite?: boolean } & CallOptions = {}): Promise<FileEntry> {
    return this.client.call({ method: "POST", key: "auto", call: opts, path: this.base + "/move", json: { from, to, overwrite: !!opts.overwrite } satisfies Schemas["MoveRequest"] });
  }

  /** Remove a file, or a directory (recursive for one with entries). */
  async remove(path: string, opts: { recursive?: boolean } & CallOptions = {}): Promise<void> {
    await this.client.call({ method: "DELETE", key: "auto", call: opts, path: this.base, params: { path, recursive: opts.recursive ? "true" : undefined } });
  }

  /** Send a local folder into path as tar.gz, keeping modes, symlinks
   * inside it and empty directories (Node only): packed into a temporary
   * file, then streamed with its sha-256 for the server to check.
   *
   * @example
   * ```ts
   * // The folder's .coveignore files say what stays behind.
   * await sb.files.uploadDir("./project", "/workspace/project");
   * const r = await sb.run("cd /workspace/project && npm test");
   * ```
   */
  async uploadDir(local: string, path: string, opts: { exclude?: string[] } & CallOptions = {}): Promise<ArchiveResult> {
    return withPackedDir(local, opts.exclude ?? [], async (body, digest) => this.client.call({
      method: "PUT", call: opts, path: this.base + "/archive", params: { path }, body,
      headers: { "Content-Type": "application/gzip", "Repr-Digest": digest },
    }));
  }

  /** Fetch a folder of the sandbox into local (Node only). */
  async downloadDir(path: string, local: string, opts: CallOptions = {}): Promise<void> {
    const { unpack } = await import("./tar.js");
    const resp = await this.client.send({ method: "GET", call: opts, path: this.base + "/archive", params: { path } });
    await unpack(new Uint8Array(await resp.arrayBuffer()), local);
  }

  /** Follow the changes under a folder as they happen (`recursive`: and
   * below it, folders made later included), after the record `after` (a
   * record's seq; 0: from now on). A dropped connection is resumed after
   * the last record seen, so nothing the server still keeps is missed; a
   * `dropped` record counts changes not reported. Ends when the folder or
   * its sandbox is gone; stop early with `break` or `signal`. */
  async *watch(path: string, opts: { recursive?: boolean; after?: number } & CallOptions = {}): AsyncGenerator<FileEvent> {
    let seq = opts.after ?? 0;
    let failures = 0;
    for (;;) {
      const began = Date.now();
      try {
        const resp = await this.client.send({
          method: "GET", path: this.base + "/watch", stream: true, call: opts,
          params: { path, recursive: opts.recursive ? "true" : undefined, after: seq || undefined },
          headers: { Accept: "application/x-ndjson" },
        });
        for await (const raw of lines(resp.body!)) {
          const text = dec.decode(raw).trim();
          if (!text) continue; // keepalive
          const ev = camel<FileEvent>(JSON.parse(text));
          if (ev.seq > seq) seq = ev.seq;
          failures = 0;
          yield ev;
        }
        return;
      } catch (e) {
        if (!(e instanceof Unavailable && e.status === 0)) throw e;
      }
      if (Date.now() - began > LASTED_MS) failures = 0;
      failures++;
      if (failures > STREAM_RETRIES) {
        throw new Unavailable(`the watch of ${path} broke ${failures} times in a row, last after seq ${seq}`);
      }
      try {
        await sleep(Math.min(50 * 2 ** failures, 5000), opts.signal);
      } catch (e) {
        throw new Cancelled(`watch of ${path}: cancelled`, null, 0, { cause: e });
      }
    }
  }
}
