// Retries, timeouts, cancellation and transport failures, against small
// HTTP servers on loopback that answer as a test needs; the last test
// cuts a real server's answer to a create.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, IncomingMessage, Server, ServerResponse } from "node:http";
import { connect, createServer as createTcpServer, Socket } from "node:net";

import * as cove from "@cove-dev/sdk";
import { KEY, URL_, name, skip } from "./helpers.js";

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  at: number;
}

/** An HTTP server on a free loopback port answering each request with
 * handler(n), n counting from 0; it records what it was sent. */
async function fakeServer(handler: (n: number, req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; seen: Seen[]; close: () => Promise<void> }> {
  const seen: Seen[] = [];
  const server: Server = createServer((req, res) => {
    seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, at: Date.now() });
    req.resume();
    req.on("end", () => handler(seen.length - 1, req, res));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`, seen,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

function answer(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

const sandbox = { id: "sbx_1", name: "one", team_id: "team_1", state: "running", workdir: "/home/user", exit_code: null };

test("a 429 with Retry-After: 1 is retried after at least a second", async () => {
  const s = await fakeServer((n, _req, res) => {
    if (n === 0) answer(res, 429, { error: { code: "resource_exhausted", message: "slow down" } }, { "Retry-After": "1" });
    else answer(res, 200, sandbox);
  });
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k" });
    const sb = await c.get("one");
    assert.equal(sb.info.teamId, "team_1", "the answer is read back in camelCase");
    assert.equal(s.seen.length, 2);
    assert.ok(s.seen[1].at - s.seen[0].at >= 1000, `retried after ${s.seen[1].at - s.seen[0].at} ms`);
  } finally {
    await s.close();
  }
});

test("503 and a 409 with Retry-After are retried; a plain 409 is not", async () => {
  const s = await fakeServer((n, req, res) => {
    if (req.url?.startsWith("/v1/sandboxes/plain")) return answer(res, 409, { error: { code: "conflict", message: "no" } });
    if (n === 0) answer(res, 503, { error: { code: "unavailable", message: "busy" } }, { "Retry-After": "0" });
    else if (n === 1) answer(res, 409, { error: { code: "conflict", message: "in flight", details: { retry_after_s: 0 } } }, { "Retry-After": "0" });
    else answer(res, 201, sandbox);
  });
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k" });
    await c.create({ name: "one" });
    assert.equal(s.seen.length, 3);
    const keys = new Set(s.seen.map((x) => x.headers["idempotency-key"]));
    assert.equal(keys.size, 1, "every attempt carries the same Idempotency-Key");
    assert.ok([...keys][0], "a create carries an Idempotency-Key by default");
    await assert.rejects(c.get("plain"), cove.Conflict);
    assert.equal(s.seen.length, 4);
  } finally {
    await s.close();
  }
});

test("a call that takes no Idempotency-Key is sent once, without one", async () => {
  const s = await fakeServer((_n, _req, res) => answer(res, 503, { error: { code: "unavailable", message: "busy" } }, { "Retry-After": "0" }));
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k" });
    await assert.rejects(c.createTeam("t"), (e: unknown) => e instanceof cove.Unavailable && e.status === 503);
    await assert.rejects(c.createTicket("/v1/x"), cove.Unavailable);
    assert.equal(s.seen.length, 2);
    for (const x of s.seen) assert.equal(x.headers["idempotency-key"], undefined);
  } finally {
    await s.close();
  }
});

test("retries stop at maxRetries", async () => {
  const s = await fakeServer((_n, _req, res) => answer(res, 503, { error: { code: "unavailable", message: "busy" } }, { "Retry-After": "0" }));
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k", maxRetries: 2 });
    await assert.rejects(c.get("x"), cove.Unavailable);
    assert.equal(s.seen.length, 3);
  } finally {
    await s.close();
  }
});

test("an error carries the code, status and request ID", async () => {
  const s = await fakeServer((_n, _req, res) => answer(res, 404, { error: { code: "not_found", message: "no such sandbox" } }));
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k" });
    await assert.rejects(c.get("x"), (e: unknown) => {
      assert.ok(e instanceof cove.NotFound);
      assert.equal(e.code, "not_found");
      assert.equal(e.status, 404);
      assert.equal(e.requestId, s.seen[0].headers["x-request-id"]);
      assert.match(e.requestId, /^req_/);
      return true;
    });
  } finally {
    await s.close();
  }
});

test("a transport error is the SDK's own error: unavailable, no status", async () => {
  // A port that was free a moment ago: nothing listens there.
  const probe = createTcpServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const c = new cove.Client({ url: `http://127.0.0.1:${port}`, apiKey: "k", maxRetries: 1 });
  await assert.rejects(c.get("x"), (e: unknown) => {
    assert.ok(e instanceof cove.CoveError, `not a CoveError: ${e}`);
    assert.ok(e instanceof cove.Unavailable);
    assert.equal(e.code, "unavailable");
    assert.equal(e.status, 0);
    assert.match(e.requestId, /^req_/);
    return true;
  });
});

test("a connection cut while the body comes is the SDK's own error", async () => {
  const s = await fakeServer((_n, _req, res) => {
    res.writeHead(200, { "Content-Type": "application/json", "Content-Length": "1000" });
    res.write('{"id": "sbx_');
    setImmediate(() => res.socket?.destroy());
  });
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k", maxRetries: 0 });
    await assert.rejects(c.get("x"), (e: unknown) => e instanceof cove.Unavailable && e.status === 0);
  } finally {
    await s.close();
  }
});

test("a call past its timeout is DeadlineExceeded; an aborted one Cancelled", async () => {
  const s = await fakeServer(() => { /* never answers */ });
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k", timeoutMs: 200 });
    await assert.rejects(c.get("x"), cove.DeadlineExceeded);
    await assert.rejects(c.get("x", { timeoutMs: 100 }), cove.DeadlineExceeded);
    const ctl = new AbortController();
    const p = c.get("x", { signal: ctl.signal, timeoutMs: 0 });
    ctl.abort();
    await assert.rejects(p, cove.Cancelled);
    const pre = AbortSignal.abort();
    await assert.rejects(c.teamMe({ signal: pre }), cove.Cancelled);
  } finally {
    await s.close();
  }
});

test("options go out in snake_case, maps keep their keys", async () => {
  let body = "";
  const server = createServer((req, res) => {
    req.setEncoding("utf8");
    req.on("data", (c: string) => (body += c));
    req.on("end", () => answer(res, 201, sandbox));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  try {
    const c = new cove.Client({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, apiKey: "k" });
    await c.create({ idleTimeoutS: 60, memoryMib: 512, labels: { my_label: "x" }, env: { SOME_VAR: "1" } });
    const sent = JSON.parse(body);
    assert.equal(sent.idle_timeout_s, 60);
    assert.equal(sent.resources.memory_mib, 512);
    assert.deepEqual(sent.labels, { my_label: "x" });
    assert.deepEqual(sent.env, { SOME_VAR: "1" });
  } finally {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
});

/** A TCP proxy on loopback that forwards everything, except that the
 * first `cuts` answers are cut off: when the server starts answering
 * such a connection, both sides are closed and the client gets nothing. */
async function answerCutter(target: URL, cuts: number): Promise<{ url: string; connections: () => number; close: () => Promise<void> }> {
  let n = 0;
  const socks: Socket[] = [];
  const server = createTcpServer((c) => {
    const cut = n++ < cuts;
    const u = connect(Number(target.port), target.hostname);
    socks.push(c, u);
    c.pipe(u);
    u.on("data", (b) => {
      if (cut) {
        c.destroy();
        u.destroy();
      } else c.write(b);
    });
    const kill = () => { c.destroy(); u.destroy(); };
    for (const s of [c, u]) { s.on("error", kill); s.on("close", kill); }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    connections: () => n,
    close: async () => {
      for (const s of socks) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

test("a create whose answer is cut is retried under its Idempotency-Key and makes one sandbox", { skip }, async () => {
  const proxy = await answerCutter(new URL(URL_), 1);
  const label = name("cut");
  const direct = new cove.Client({ url: URL_, apiKey: KEY });
  try {
    const c = new cove.Client({ url: proxy.url, apiKey: KEY });
    const sb = await c.create({ labels: { cut: label } }, { idempotencyKey: "idk-" + label });
    assert.ok(proxy.connections() >= 2, "the first answer was cut and the create retried");
    const found: string[] = [];
    for await (const s of direct.list({ labels: { cut: label } })) found.push(s.id);
    assert.deepEqual(found, [sb.id]);
  } finally {
    for await (const s of direct.list({ labels: { cut: label } })) await (await direct.get(s.id)).terminate().catch(() => {});
    await proxy.close();
  }
});

test("a folder upload whose answer is cut is sent again in full from its packed file", { skip }, async () => {
  const { mkdtemp, mkdir, writeFile, rm } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { createHash } = await import("node:crypto");
  const dir = await mkdtemp(join(tmpdir(), "cove-cut-upload-"));
  const data = new Uint8Array(3 << 20).map((_, i) => (i * 7) & 0xff);
  await mkdir(join(dir, "src"));
  await writeFile(join(dir, "src", "main.js"), "console.log('hi')\n");
  await writeFile(join(dir, "data.bin"), data);
  const direct = new cove.Client({ url: URL_, apiKey: KEY });
  const sb = await direct.create({ name: name("ts-cut-upload") });
  const proxy = await answerCutter(new URL(URL_), 1);
  try {
    // The proxy's first connection is the upload's: its answer is cut.
    const files = new cove.Files(new cove.Client({ url: proxy.url, apiKey: KEY }), sb.id);
    const result = await files.uploadDir(dir, "/tmp/project");
    assert.ok(proxy.connections() >= 2, "the first answer was cut and the upload retried");
    assert.equal(result.path, "/tmp/project");
    const out = await sb.run("sha256sum /tmp/project/data.bin && cat /tmp/project/src/main.js");
    assert.ok(out.stdout.includes(createHash("sha256").update(data).digest("hex")), out.stdout);
    assert.ok(out.stdout.includes("console.log('hi')"), out.stdout);
  } finally {
    await sb.terminate().catch(() => {});
    await proxy.close();
    await rm(dir, { recursive: true, force: true });
  }
});
