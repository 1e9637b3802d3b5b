// The cove client: sandboxes, commands, files, assets, previews, events,
// secrets, teams and tickets, over the platform's fetch. API fields keep the API's own names
// (snake_case); what only the SDK adds (wait, ifVersion, after, …) is
// camelCase.

import { Attachment, AttachOptions, openAttachment } from "./attach.js";
import { Conflict, CoveError, InvalidArgument, NotFound, errorFrom } from "./errors.js";
import type {
  Admission, ArchiveResult, Asset, Chunk, CommandInfo, CommandResult, CreateCommandRequest, CreateOptions,
  CreatePreviewRequest, CreateTeamResponse, CreateWebhookRequest, CreateWebhookResponse, SaveAssetRequest, Delivery, Event, FileEntry, Image, ImageSettings, KeyResponse, Metrics,
  NetworkView, Page, Preview, SandboxInfo, Schemas, SandboxState, SandboxUsage, Secret, Team, TeamMe, Template, Ticket,
  UpdateSandboxRequest, UpdateTeamRequest, UsageReport, Webhook, Workload, WorkloadOptions, WorkloadState,
} from "./types.js";
import {
  Data, b64decode, b64encode, checkDigest, commandPath, dropUndefined, esc, lines, parseDigest, reprDigest, sandboxPath,
  sleep, toBytes, versionOf,
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

interface Req {
  method: string;
  path: string;
  params?: Params;
  json?: unknown;
  body?: Uint8Array | ReadableStream<Uint8Array>;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export interface ClientOptions {
  /** The server, e.g. http://127.0.0.1:7070; default COVE_URL. */
  url?: string;
  /** An API key; default COVE_API_KEY. */
  apiKey?: string;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
}

/** A cove client. url and apiKey default to COVE_URL and COVE_API_KEY
 * where the platform has environment variables (Node). */
export class Client {
  readonly url: string;
  /** @internal */
  readonly apiKey: string;
  private readonly _fetch: typeof fetch;

  constructor(opts: ClientOptions = {}) {
    const url = opts.url || env("COVE_URL") || DEFAULT_URL;
    const key = opts.apiKey || env("COVE_API_KEY") || "";
    if (!key) throw new InvalidArgument("no API key: pass apiKey or set COVE_API_KEY");
    this.url = url.replace(/\/+$/, "");
    this.apiKey = key;
    this._fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
  }

  // -- plumbing --

  /** @internal */
  async send(r: Req): Promise<Response> {
    const u = new URL(this.url + r.path);
    for (const [k, v] of Object.entries(r.params ?? {})) {
      if (v === undefined || v === null || v === "") continue;
      if (Array.isArray(v)) for (const x of v) u.searchParams.append(k, x);
      else u.searchParams.set(k, String(v));
    }
    const headers: Record<string, string> = { Authorization: "Bearer " + this.apiKey, ...(r.headers ?? {}) };
    let body: BodyInit | undefined;
    const init: RequestInit & { duplex?: "half" } = { method: r.method, headers, signal: r.signal };
    if (r.json !== undefined) {
      body = JSON.stringify(r.json);
      headers["Content-Type"] = "application/json";
    } else if (r.body instanceof Uint8Array) {
      body = r.body as Uint8Array<ArrayBuffer>;
    } else if (r.body !== undefined) {
      // A streamed body: fetch sends it as it is read (chunked).
      body = r.body;
      init.duplex = "half";
    }
    init.body = body;
    const resp = await this._fetch(u, init);
    if (resp.status >= 300) throw errorFrom(resp.status, await resp.text());
    return resp;
  }

  /** @internal */
  async json<T = any>(r: Req): Promise<T> {
    const resp = await this.send(r);
    const text = await resp.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** @internal The NDJSON output records at path (a command's or a
   * workload's) after seq `after`, resumed after a dropped connection.
   * started, when given, is awaited when the server answers Conflict (no
   * output yet) while following: it waits until there is some, or throws. */
  async *readOutput(path: string, what: string, opts: { after?: number; follow?: boolean },
    started?: () => Promise<void>): AsyncGenerator<Chunk> {
    const follow = opts.follow ?? true;
    let seq = opts.after ?? 0;
    let failures = 0;
    for (;;) {
      const began = Date.now();
      try {
        const resp = await this.send({
          method: "GET", path, params: { after: seq, follow: follow ? "true" : undefined },
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
        if (e instanceof CoveError) throw e;
      }
      // A connection that lasted (a long silence ended by a timeout on the
      // way) is not a failure in a row.
      if (Date.now() - began > LASTED_MS) failures = 0;
      failures++;
      if (failures > STREAM_RETRIES) {
        throw new CoveError(`the output stream of ${what} broke ${failures} times in a row, last after seq ${seq}`);
      }
      await sleep(Math.min(50 * 2 ** failures, 5000));
    }
  }

  // -- sandboxes --

  /** Create a sandbox, and wait until it runs unless wait is false. */
  async create(fields: CreateOptions = {}, opts: { wait?: boolean; idempotencyKey?: string } = {}): Promise<Sandbox> {
    const { cpus, memory_mib, disk_mib, ...rest } = fields;
    const res = dropUndefined({ cpus, memory_mib, disk_mib, ...(fields.resources ?? {}) });
    const body = dropUndefined({ ...rest, resources: Object.keys(res).length ? res : undefined });
    const headers: Record<string, string> = {};
    if (opts.idempotencyKey) headers["Idempotency-Key"] = opts.idempotencyKey;
    const info = await this.json<SandboxInfo>({
      method: "POST", path: "/v1/sandboxes", params: { wait: opts.wait === false ? undefined : "running" }, json: body,
      headers,
    });
    return new Sandbox(this, info);
  }

  /** A sandbox by ID or name. */
  async get(ref: string): Promise<Sandbox> {
    return new Sandbox(this, await this.json<SandboxInfo>({ method: "GET", path: sandboxPath(ref) }));
  }

  /** Every sandbox of the team (newest first), page after page. */
  async *list(opts: { state?: string | string[]; labels?: Record<string, string>; limit?: number } = {}): AsyncGenerator<SandboxInfo> {
    let cursor = "";
    for (;;) {
      const page = await this.listPage({ ...opts, cursor });
      yield* page.items;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /** One page of sandboxes. */
  async listPage(opts: { state?: string | string[]; labels?: Record<string, string>; limit?: number; cursor?: string } = {}): Promise<Page<SandboxInfo>> {
    const state = opts.state === undefined ? undefined : Array.isArray(opts.state) ? opts.state : [opts.state];
    const label = opts.labels ? Object.entries(opts.labels).map(([k, v]) => `${k}=${v}`) : undefined;
    const d = await this.json({
      method: "GET", path: "/v1/sandboxes", params: { limit: opts.limit ?? 100, state, label, cursor: opts.cursor },
    });
    return { items: d?.items ?? [], next_cursor: d?.next_cursor ?? "" };
  }

  // -- events --

  /** One page of the team's events, oldest first. */
  async events(opts: { sandbox?: string; types?: string[]; after?: string; limit?: number } = {}): Promise<Page<Event>> {
    const d = await this.json({
      method: "GET", path: "/v1/events",
      params: { limit: opts.limit ?? 100, sandbox: opts.sandbox, type: opts.types, after: opts.after },
    });
    return { items: d?.items ?? [], next_cursor: d?.next_cursor ?? "" };
  }

  /** Follow the team's events as they happen (server-sent events read
   * with fetch and the Authorization header), resuming after the last one
   * seen (Last-Event-ID) when the connection drops. Stop by breaking out
   * of the loop, or with signal (the iteration then ends). */
  async *streamEvents(opts: { sandbox?: string; types?: string[]; after?: string; signal?: AbortSignal } = {}): AsyncGenerator<Event> {
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
          signal: ctl.signal,
        });
        let data: string[] = [];
        for await (const raw of lines(resp.body!)) {
          const line = dec.decode(raw).replace(/\r$/, "");
          if (line === "") {
            if (!data.length) continue;
            const ev = JSON.parse(data.join("\n")) as Event;
            data = [];
            last = ev.id || last;
            failures = 0;
            yield ev;
            continue;
          }
          if (line.startsWith(":")) continue;
          const i = line.indexOf(":");
          const name = i < 0 ? line : line.slice(0, i);
          let value = i < 0 ? "" : line.slice(i + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (name === "id") last = value || last;
          else if (name === "data") data.push(value);
        }
        // The server ended the stream: follow on after a pause.
        if (!opts.signal?.aborted) await sleep(100);
      } catch (e) {
        if (opts.signal?.aborted) return;
        if (e instanceof CoveError) throw e;
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
  async createAsset(data: Data | ReadableStream<Uint8Array>, opts: { name?: string; sha256?: string } = {}): Promise<Asset> {
    const headers: Record<string, string> = { "Content-Type": "application/gzip" };
    let body: Uint8Array | ReadableStream<Uint8Array>;
    if (typeof ReadableStream !== "undefined" && data instanceof ReadableStream) {
      body = data;
      if (opts.sha256) headers["Repr-Digest"] = hexDigest(opts.sha256);
    } else {
      body = toBytes(data as Data);
      headers["Repr-Digest"] = await reprDigest(body);
    }
    return this.json({ method: "POST", path: "/v1/assets", params: { name: opts.name }, body, headers });
  }

  /** Store a local tar or tar.gz file as an asset (Node only): hashed,
   * then streamed with its sha-256. */
  async createAssetFromFile(file: string, opts: { name?: string } = {}): Promise<Asset> {
    const { hashFile, fileStream } = await import("./nodefile.js");
    const sha256 = await hashFile(file);
    return this.createAsset(await fileStream(file), { name: opts.name, sha256 });
  }

  /** Store a local folder as an asset (Node only): packed as tar.gz
   * (modes, symlinks inside it and empty directories kept; exclude
   * patterns and a .coveignore file honoured) into a temporary file, then
   * streamed with its sha-256. */
  async createAssetFromDir(local: string, opts: { name?: string; exclude?: string[] } = {}): Promise<Asset> {
    return withPackedDir(local, opts.exclude ?? [], (body, digest) => this.json({
      method: "POST", path: "/v1/assets", params: { name: opts.name }, body,
      headers: { "Content-Type": "application/gzip", "Repr-Digest": digest },
    }));
  }

  getAsset(id: string): Promise<Asset> {
    return this.json({ method: "GET", path: assetPath(id) });
  }

  /** Every asset of the team, page after page. */
  async *listAssets(opts: { limit?: number } = {}): AsyncGenerator<Asset> {
    let cursor = "";
    for (;;) {
      const page = await this.listAssetsPage({ ...opts, cursor });
      yield* page.items;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /** One page of the team's assets. */
  async listAssetsPage(opts: { limit?: number; cursor?: string } = {}): Promise<Page<Asset>> {
    const d = await this.json({ method: "GET", path: "/v1/assets", params: { limit: opts.limit ?? 100, cursor: opts.cursor } });
    return { items: d?.items ?? [], next_cursor: d?.next_cursor ?? "" };
  }

  /** An asset's bytes, checked against the server's sha-256 (DigestMismatch if not). */
  async readAsset(id: string): Promise<Uint8Array> {
    const resp = await this.send({ method: "GET", path: assetPath(id) + "/content" });
    const data = new Uint8Array(await resp.arrayBuffer());
    await checkDigest(id, data, resp.headers.get("Repr-Digest"));
    return data;
  }

  /** Stream an asset's bytes into the local file (Node only), checked
   * against the server's sha-256; on a mismatch the file is removed and
   * DigestMismatch thrown. */
  async downloadAsset(id: string, local: string): Promise<void> {
    const { saveChecked } = await import("./nodefile.js");
    const resp = await this.send({ method: "GET", path: assetPath(id) + "/content" });
    await saveChecked(id, resp.body!, parseDigest(resp.headers.get("Repr-Digest") ?? ""), local);
  }

  /** Delete an asset; sandboxes made from it keep their files. */
  async deleteAsset(id: string): Promise<void> {
    await this.json({ method: "DELETE", path: assetPath(id) });
  }

  // -- workloads --

  /** Submit a batch run (fields.command, a shell string, or fields.argv);
   * it is queued until a node can place it. fields.image names an
   * imported image to run in instead of a template. */
  async submitWorkload(fields: WorkloadOptions, opts: { idempotencyKey?: string } = {}): Promise<Workload> {
    if ((fields.command === undefined) === (fields.argv === undefined)) {
      throw new InvalidArgument("give exactly one of command (a shell string) and argv (a list)");
    }
    const headers: Record<string, string> = {};
    if (opts.idempotencyKey) headers["Idempotency-Key"] = opts.idempotencyKey;
    return this.json({ method: "POST", path: "/v1/workloads", json: dropUndefined({ ...fields }), headers });
  }

  /** A workload; with opts.wait (a state, e.g. "running" or "exited") the
   * server answers once it is in that state or has ended, or after
   * opts.timeout_s. */
  getWorkload(id: string, opts: { wait?: string; timeout_s?: number } = {}): Promise<Workload> {
    const params = opts.wait ? { wait: opts.wait, timeout_s: opts.timeout_s } : {};
    return this.json({ method: "GET", path: workloadPath(id), params });
  }

  /** Wait until the workload is in state (default "exited") or has ended,
   * long-polling again until then. */
  async waitWorkload(id: string, state: WorkloadState = "exited", opts: { timeout_s?: number } = {}): Promise<Workload> {
    for (;;) {
      const w = await this.getWorkload(id, { wait: state, timeout_s: opts.timeout_s ?? 300 });
      if (w.state === state || workloadDone(w)) return w;
    }
  }

  /** Every workload of the team (oldest first), page after page. */
  async *listWorkloads(opts: { state?: string | string[]; limit?: number } = {}): AsyncGenerator<Workload> {
    let cursor = "";
    for (;;) {
      const page = await this.listWorkloadsPage({ ...opts, cursor });
      yield* page.items;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  /** One page of the team's workloads. */
  async listWorkloadsPage(opts: { state?: string | string[]; limit?: number; cursor?: string } = {}): Promise<Page<Workload>> {
    const state = opts.state === undefined ? undefined : Array.isArray(opts.state) ? opts.state : [opts.state];
    const d = await this.json({
      method: "GET", path: "/v1/workloads", params: { limit: opts.limit ?? 100, state, cursor: opts.cursor },
    });
    return { items: d?.items ?? [], next_cursor: d?.next_cursor ?? "" };
  }

  /** Cancel a queued or running workload; answered once its container is
   * gone (a workload that ended is answered as it is). */
  cancelWorkload(id: string): Promise<Workload> {
    return this.json({ method: "POST", path: workloadPath(id) + "/cancel" });
  }

  /** A workload's output records after seq `after`, read as a command's:
   * in order, the exit last, resumed after a dropped connection. Following
   * a workload that has not started yet waits until it does (one that ends
   * without running throws Conflict). */
  workloadOutput(id: string, opts: { after?: number; follow?: boolean } = {}): AsyncGenerator<Chunk> {
    return this.readOutput(workloadPath(id) + "/output", id, opts, async () => {
      const w = await this.getWorkload(id, { wait: "running", timeout_s: 60 });
      if (workloadDone(w) && !w.started_at) {
        throw new Conflict(`workload ${id} is ${w.state} and never ran: it has no output`, {}, 409);
      }
    });
  }

  /** A workload's recorded stdout, raw. */
  async workloadStdout(id: string): Promise<Uint8Array> {
    return new Uint8Array(await (await this.send({ method: "GET", path: workloadPath(id) + "/stdout" })).arrayBuffer());
  }

  /** A workload's recorded stderr, raw. */
  async workloadStderr(id: string): Promise<Uint8Array> {
    return new Uint8Array(await (await this.send({ method: "GET", path: workloadPath(id) + "/stderr" })).arrayBuffer());
  }

  // -- images --

  /** Import an image from an OCI image layout archive or a `docker save`
   * archive (bytes, or a ReadableStream sent as it is read) as the team's
   * image called opts.name. */
  async importImage(data: Uint8Array | ReadableStream<Uint8Array>, opts: { name: string; settings?: ImageSettings }): Promise<Image> {
    if (!opts.name) throw new InvalidArgument("an imported image needs a name");
    return this.json({
      method: "POST", path: "/v1/images", body: data, headers: { "Content-Type": "application/x-tar" },
      params: { name: opts.name, settings: opts.settings ? JSON.stringify(opts.settings) : undefined },
    });
  }

  /** Import an image from a local archive file (Node only), streamed. */
  async importImageFromFile(file: string, opts: { name: string; settings?: ImageSettings }): Promise<Image> {
    const { fileStream } = await import("./nodefile.js");
    return this.importImage(await fileStream(file), opts);
  }

  /** The images the team may see. */
  async images(): Promise<Image[]> {
    return (await this.json({ method: "GET", path: "/v1/images" }))?.items ?? [];
  }

  /** An image by ID or name. */
  getImage(ref: string): Promise<Image> {
    return this.json({ method: "GET", path: imagePath(ref) });
  }

  /** Change an image's settings; those left out keep theirs. */
  updateImage(ref: string, settings: ImageSettings): Promise<Image> {
    return this.json({ method: "PATCH", path: imagePath(ref), json: settings });
  }

  /** Delete an image no sandbox uses (Conflict while one does). */
  async deleteImage(ref: string): Promise<void> {
    await this.json({ method: "DELETE", path: imagePath(ref) });
  }

  // -- secrets --

  /** Store a secret of the team (its value is never returned). */
  putSecret(name: string, value: string): Promise<Secret> {
    return this.json({ method: "PUT", path: "/v1/secrets/" + esc(name), json: { value } satisfies Schemas["PutSecretRequest"] });
  }

  /** A secret's name and times. */
  getSecret(name: string): Promise<Secret> {
    return this.json({ method: "GET", path: "/v1/secrets/" + esc(name) });
  }

  /** Every secret's name and times. */
  async listSecrets(): Promise<Secret[]> {
    const out: Secret[] = [];
    let cursor = "";
    for (;;) {
      const d = await this.json({ method: "GET", path: "/v1/secrets", params: { cursor } });
      out.push(...(d?.items ?? []));
      cursor = d?.next_cursor ?? "";
      if (!cursor) return out;
    }
  }

  async deleteSecret(name: string): Promise<void> {
    await this.json({ method: "DELETE", path: "/v1/secrets/" + esc(name) });
  }

  // -- webhooks --

  /** Registers a URL for the team's events; `secret` (whsec_...) is shown only here. */
  createWebhook(url: string, events?: string[]): Promise<CreateWebhookResponse> {
    const body: CreateWebhookRequest = events && events.length ? { url, events } : { url };
    return this.json({ method: "POST", path: "/v1/webhooks", json: body });
  }

  async listWebhooks(): Promise<Webhook[]> {
    const out: Webhook[] = [];
    let cursor = "";
    for (;;) {
      const d = await this.json<Page<Webhook>>({ method: "GET", path: "/v1/webhooks", params: { cursor } });
      out.push(...(d?.items ?? []));
      cursor = d?.next_cursor ?? "";
      if (!cursor) return out;
    }
  }

  getWebhook(id: string): Promise<Webhook> {
    return this.json({ method: "GET", path: "/v1/webhooks/" + esc(id) });
  }

  async deleteWebhook(id: string): Promise<void> {
    await this.json({ method: "DELETE", path: "/v1/webhooks/" + esc(id) });
  }

  /** The webhook's latest deliveries, newest first, with their attempts. */
  async webhookDeliveries(id: string, limit = 100): Promise<Delivery[]> {
    const d = await this.json<Page<Delivery>>({ method: "GET", path: "/v1/webhooks/" + esc(id) + "/deliveries", params: { limit: String(limit) } });
    return d?.items ?? [];
  }

  // -- teams, keys, tickets --

  /** A new team and its first API key (shown once). Admin only. */
  createTeam(name: string): Promise<CreateTeamResponse> {
    return this.json({ method: "POST", path: "/v1/teams", json: { name } satisfies Schemas["CreateTeamRequest"] });
  }

  async listTeams(): Promise<Team[]> {
    return (await this.json<Page<Team>>({ method: "GET", path: "/v1/teams" }))?.items ?? [];
  }

  /** A new API key for a team (shown once). */
  createKey(teamId: string): Promise<KeyResponse> {
    return this.json({ method: "POST", path: "/v1/teams/" + esc(teamId) + "/keys" });
  }

  async revokeKey(keyId: string): Promise<void> {
    await this.json({ method: "DELETE", path: "/v1/keys/" + esc(keyId) });
  }

  /** A single-use ticket for one attach path, for browser WebSockets. */
  createTicket(path: string): Promise<Ticket> {
    return this.json({ method: "POST", path: "/v1/tickets", json: { path } satisfies Schemas["CreateTicketRequest"] });
  }

  /** The team's usage and cost (from and to: RFC 3339; group_by: "day" or
   * "sandbox"), its spend this month and its monthly limit. */
  usage(opts: { from?: string; to?: string; group_by?: "day" | "sandbox" | string } = {}): Promise<UsageReport> {
    return this.json({ method: "GET", path: "/v1/usage", params: { from: opts.from, to: opts.to, group_by: opts.group_by } });
  }

  /** PATCH a team (admin key): admission, spend_limit_usd (a month's;
   * negative removes it), budget_alerts. */
  updateTeam(teamId: string, fields: UpdateTeamRequest): Promise<Team> {
    return this.json({ method: "PATCH", path: "/v1/teams/" + esc(teamId), json: dropUndefined(fields) });
  }

  /** The key's own team: its admission flags and limits. */
  teamMe(): Promise<TeamMe> {
    return this.json({ method: "GET", path: "/v1/teams/me" });
  }

  /** Replace a team's admission flags, all four (admin key). */
  setAdmission(teamId: string, admission: Admission): Promise<Team> {
    return this.json({ method: "PATCH", path: "/v1/teams/" + esc(teamId), json: { admission } satisfies Schemas["UpdateTeamRequest"] });
  }

  /** The templates the team may use: status, progress, qualified. */
  async templates(): Promise<Template[]> {
    return (await this.json<Page<Template>>({ method: "GET", path: "/v1/templates" }))?.items ?? [];
  }

  /** The API's OpenAPI document (its schema is any JSON object). */
  openapi(): Promise<Record<string, any>> {
    return this.json({ method: "GET", path: "/v1/openapi.json" });
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

/** Run send with a local folder packed as tar.gz into a temporary file
 * (removed after): its bytes as a stream and their Repr-Digest (Node only). */
async function withPackedDir<T>(local: string, exclude: string[], send: (body: ReadableStream<Uint8Array>, digest: string) => Promise<T>): Promise<T> {
  const [{ packDirToFile }, { fileStream }, fs, os, path] = await Promise.all([
    import("./tar.js"), import("./nodefile.js"), import("node:fs/promises"), import("node:os"), import("node:path"),
  ]);
  const tmp = await fs.mkdtemp(path.join(os.tmpdir(), "cove-pack-"));
  try {
    const file = path.join(tmp, "folder.tar.gz");
    const sha256 = await packDirToFile(local, file, exclude);
    return await send(await fileStream(file), hexDigest(sha256));
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
export function assetSource(asset: Asset | string): { type: "asset"; asset_id: string } {
  return { type: "asset", asset_id: typeof asset === "string" ? asset : asset.id };
}

/** The fields of POST …/commands besides the command string (argv: a
 * program and its arguments, run with no shell, instead of a string). */
export type CommandOptions = Omit<CreateCommandRequest, "command" | "stdin" | "pty" | "no_output_alert_s">;

export type StartOptions = Omit<CreateCommandRequest, "command">;

function commandBody(command: string | undefined, o: StartOptions): CreateCommandRequest {
  if ((command === undefined) === (o.argv === undefined)) {
    throw new InvalidArgument("give exactly one of command (a shell string) and argv (a list)");
  }
  return dropUndefined({
    command, argv: o.argv, cwd: o.cwd, env: o.env && Object.keys(o.env).length ? o.env : undefined,
    secrets: o.secrets && Object.keys(o.secrets).length ? o.secrets : undefined, timeout_s: o.timeout_s,
    stdin: o.stdin || undefined, user: o.user, pty: o.pty, no_output_alert_s: o.no_output_alert_s,
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

  async refresh(): Promise<SandboxInfo> {
    return this.set(await this.client.json({ method: "GET", path: sandboxPath(this.id) }));
  }

  /** Wait until the sandbox is in state (or a terminal one). */
  async wait(state: SandboxState, opts: { timeout_s?: number } = {}): Promise<SandboxInfo> {
    return this.set(await this.client.json({
      method: "GET", path: sandboxPath(this.id), params: { wait: state, timeout_s: opts.timeout_s ?? 300 },
    }));
  }

  /** PATCH: idle_timeout_s, on_idle, max_lifetime_s, spend_limit_usd, network, labels. */
  async update(fields: UpdateSandboxRequest): Promise<SandboxInfo> {
    return this.set(await this.client.json({ method: "PATCH", path: sandboxPath(this.id), json: dropUndefined(fields) }));
  }

  /** Save the files and release compute; waits until asleep unless wait is false. */
  async sleep(opts: { wait?: boolean } = {}): Promise<SandboxInfo> {
    this.set(await this.client.json({ method: "POST", path: sandboxPath(this.id) + "/sleep" }));
    return opts.wait === false ? this.info : this.wait("asleep");
  }

  async wake(opts: { wait?: boolean } = {}): Promise<SandboxInfo> {
    this.set(await this.client.json({ method: "POST", path: sandboxPath(this.id) + "/wake" }));
    return opts.wait === false ? this.info : this.wait("running");
  }

  async terminate(): Promise<SandboxInfo> {
    return this.set(await this.client.json({ method: "DELETE", path: sandboxPath(this.id) }));
  }

  /** The policy and what the sandbox tried to reach. */
  network(): Promise<NetworkView> {
    return this.client.json({ method: "GET", path: sandboxPath(this.id) + "/network" });
  }

  /** Resource samples and the gaps in them (from and to: RFC 3339; step:
   * seconds or a duration such as "1m"). */
  metrics(opts: { from?: string; to?: string; step?: string } = {}): Promise<Metrics> {
    return this.client.json({
      method: "GET", path: sandboxPath(this.id) + "/metrics", params: { from: opts.from, to: opts.to, step: opts.step },
    });
  }

  /** What the sandbox used and cost, its spend limit and price per hour. */
  usage(): Promise<SandboxUsage> {
    return this.client.json({ method: "GET", path: sandboxPath(this.id) + "/usage" });
  }

  // -- previews --

  /** Publish a port over HTTP (visibility "private", the default, or
   * "public"; wake lets a request wake an asleep sandbox). A private
   * preview's token and one-time link are in this answer only. */
  async preview(port: number, opts: Omit<CreatePreviewRequest, "port"> = {}): Promise<Preview> {
    const body: CreatePreviewRequest = { port, visibility: opts.visibility, wake: opts.wake };
    return this.client.json<Preview>({ method: "POST", path: sandboxPath(this.id) + "/previews", json: dropUndefined(body) });
  }

  /** The sandbox's previews (without tokens). */
  async previews(): Promise<Preview[]> {
    const d = await this.client.json({ method: "GET", path: sandboxPath(this.id) + "/previews" });
    return (d?.items ?? []) as Preview[];
  }

  async deletePreview(id: string): Promise<void> {
    await this.client.json({ method: "DELETE", path: sandboxPath(this.id) + "/previews/" + esc(id) });
  }

  // -- assets --

  /** Save a folder of the sandbox as an asset of the team (the same bytes
   * as an existing asset answer that one). */
  saveAsset(path: string, opts: Omit<SaveAssetRequest, "path"> = {}): Promise<Asset> {
    const body: SaveAssetRequest = { path, name: opts.name };
    return this.client.json({ method: "POST", path: sandboxPath(this.id) + "/assets", json: dropUndefined(body) });
  }

  // -- commands --

  /** Run a command to its end; its output comes back as text. */
  async run(command?: string, opts: CommandOptions = {}): Promise<CommandResult> {
    const d = await this.client.json({
      method: "POST", path: sandboxPath(this.id) + "/commands", params: { wait: "true" },
      json: commandBody(command, opts),
    });
    const info = (d?.command ?? {}) as CommandInfo;
    return {
      command: info, stdout: d?.stdout ?? "", stderr: d?.stderr ?? "", truncated: !!d?.truncated,
      exitCode: info.exit_code ?? null,
    };
  }

  /** Start a command and return at once; see Command. */
  async start(command?: string, opts: StartOptions = {}): Promise<Command> {
    const d = await this.client.json<CommandInfo>({
      method: "POST", path: sandboxPath(this.id) + "/commands", json: commandBody(command, opts),
    });
    return new Command(this.client, this.id, d);
  }

  /** A command of this sandbox by ID. */
  async command(commandId: string): Promise<Command> {
    const d = await this.client.json<CommandInfo>({ method: "GET", path: commandPath(this.id, commandId) });
    return new Command(this.client, this.id, d);
  }

  /** One page of the sandbox's commands. */
  async commands(opts: { limit?: number; cursor?: string } = {}): Promise<Page<CommandInfo>> {
    const d = await this.client.json({
      method: "GET", path: sandboxPath(this.id) + "/commands", params: { limit: opts.limit ?? 100, cursor: opts.cursor },
    });
    return { items: d?.items ?? [], next_cursor: d?.next_cursor ?? "" };
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
   * or repeated. */
  output(opts: { after?: number; follow?: boolean } = {}): AsyncGenerator<Chunk> {
    return this.client.readOutput(this.path + "/output", this.id, opts);
  }

  /** Wait for the end; the output is read (and dropped) on the way. */
  async wait(): Promise<CommandInfo> {
    for await (const ch of this.output()) if (ch.type === "exit") break;
    return this.refresh();
  }

  async refresh(): Promise<CommandInfo> {
    this.info = await this.client.json<CommandInfo>({ method: "GET", path: this.path });
    return this.info;
  }

  /** Append to the command's stdin (started with stdin: true); eof closes it. */
  async write(data: Data, opts: { eof?: boolean } = {}): Promise<void> {
    await this.client.json({
      method: "POST", path: this.path + "/stdin", params: { eof: opts.eof ? "true" : undefined }, body: toBytes(data),
      headers: { "Content-Type": "application/octet-stream" },
    });
  }

  closeStdin(): Promise<void> {
    return this.write(new Uint8Array(0), { eof: true });
  }

  /** Signal the command's whole process group ("TERM", "KILL", "INT", …). */
  async signal(sig = "TERM"): Promise<void> {
    await this.client.json({ method: "POST", path: this.path + "/signal", json: { signal: sig } satisfies Schemas["SignalRequest"] });
  }

  /** The recorded stdout, raw. */
  async stdout(): Promise<Uint8Array> {
    return new Uint8Array(await (await this.client.send({ method: "GET", path: this.path + "/stdout" })).arrayBuffer());
  }

  async stderr(): Promise<Uint8Array> {
    return new Uint8Array(await (await this.client.send({ method: "GET", path: this.path + "/stderr" })).arrayBuffer());
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
  constructor(readonly data: Uint8Array, readonly version: string, readonly sha256: Uint8Array) {}

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

  async list(path: string, opts: { depth?: number } = {}): Promise<FileEntry[]> {
    const out: FileEntry[] = [];
    let cursor = "";
    for (;;) {
      const d = await this.client.json({
        method: "GET", path: this.base, params: { path, depth: opts.depth ?? 1, limit: 1000, cursor },
      });
      out.push(...(d?.items ?? []));
      cursor = d?.next_cursor ?? "";
      if (!cursor) return out;
    }
  }

  stat(path: string): Promise<FileEntry> {
    return this.client.json({ method: "GET", path: this.base + "/stat", params: { path } });
  }

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
  async read(path: string): Promise<FileContent> {
    const resp = await this.client.send({ method: "GET", path: this.base + "/content", params: { path } });
    const data = new Uint8Array(await resp.arrayBuffer());
    const digest = await checkDigest(path, data, resp.headers.get("Repr-Digest"));
    return new FileContent(data, versionOf(resp.headers.get("ETag")), digest);
  }

  async readText(path: string): Promise<string> {
    return (await this.read(path)).text;
  }

  /** Write a whole file atomically. With ifVersion it is written only if
   * the file is still at that version ("none": only if it does not exist),
   * else PreconditionFailed and nothing changes. */
  async write(path: string, data: Data, opts: { ifVersion?: string; mode?: string } = {}): Promise<FileEntry> {
    const body = toBytes(data);
    const headers: Record<string, string> = {
      "Content-Type": "application/octet-stream", "Repr-Digest": await reprDigest(body),
    };
    if (opts.ifVersion === "none") headers["If-None-Match"] = "*";
    else if (opts.ifVersion) headers["If-Match"] = `"${opts.ifVersion}"`;
    return this.client.json({ method: "PUT", path: this.base + "/content", params: { path, mode: opts.mode }, body, headers });
  }

  /** Replace texts: each old must occur exactly once, else Conflict and
   * nothing is written. */
  edit(path: string, edits: Array<{ old: string; new: string }>, opts: { ifVersion?: string } = {}): Promise<FileEntry> {
    const headers: Record<string, string> = opts.ifVersion ? { "If-Match": `"${opts.ifVersion}"` } : {};
    return this.client.json({ method: "PATCH", path: this.base + "/content", params: { path }, json: { edits } satisfies Schemas["EditFileRequest"], headers });
  }

  mkdir(path: string): Promise<FileEntry> {
    return this.client.json({ method: "POST", path: this.base + "/mkdir", json: { path } satisfies Schemas["MkdirRequest"] });
  }

  move(from: string, to: string, opts: { overwrite?: boolean } = {}): Promise<FileEntry> {
    return this.client.json({ method: "POST", path: this.base + "/move", json: { from, to, overwrite: !!opts.overwrite } satisfies Schemas["MoveRequest"] });
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.client.json({ method: "DELETE", path: this.base, params: { path, recursive: opts.recursive ? "true" : undefined } });
  }

  /** Send a local folder into path as tar.gz, keeping modes, symlinks
   * inside it and empty directories (Node only): packed into a temporary
   * file, then streamed with its sha-256 for the server to check. */
  async uploadDir(local: string, path: string, opts: { exclude?: string[] } = {}): Promise<ArchiveResult> {
    return withPackedDir(local, opts.exclude ?? [], async (body, digest) => this.client.json({
      method: "PUT", path: this.base + "/archive", params: { path }, body,
      headers: { "Content-Type": "application/gzip", "Repr-Digest": digest },
    }));
  }

  /** Fetch a folder of the sandbox into local (Node only). */
  async downloadDir(path: string, local: string): Promise<void> {
    const { unpack } = await import("./tar.js");
    const resp = await this.client.send({ method: "GET", path: this.base + "/archive", params: { path } });
    await unpack(new Uint8Array(await resp.arrayBuffer()), local);
  }
}
