// The SDK against a real cove server (COVE_URL, COVE_API_KEY); skipped
// without one.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { gzipSync } from "node:zlib";
import { tmpdir } from "node:os";
import { join } from "node:path";

import * as cove from "@cove-dev/sdk";
import { CuttingProxy, KEY, URL_, makeTree, name, skip, tree } from "./helpers.js";

const enc = new TextEncoder();
const dec = new TextDecoder();

function client(url = URL_): cove.Client {
  return new cove.Client({ url, apiKey: KEY });
}

/** Run fn with a new sandbox, terminated after. */
async function withSandbox<T>(c: cove.Client, fields: Parameters<cove.Client["create"]>[0], fn: (sb: cove.Sandbox) => Promise<T>): Promise<T> {
  const sb = await c.create(fields);
  try {
    return await fn(sb);
  } finally {
    await sb.terminate().catch(() => {});
  }
}

test("create, run, get, list, terminate", { skip }, async () => {
  const c = client();
  const sb = await c.create({ name: name("ts"), labels: { sdk: "typescript" } });
  assert.equal(sb.info.state, "running");
  let r = await sb.run("echo hi; echo err >&2; exit 3");
  assert.deepEqual([r.stdout, r.stderr, r.exitCode], ["hi\n", "err\n", 3]);
  r = await sb.run(undefined, { argv: ["python3", "-c", "print(6*7)"] });
  assert.equal(r.stdout, "42\n");
  assert.equal((await c.get(sb.id)).id, sb.id);
  assert.equal((await c.get(sb.info.name)).id, sb.id);
  let found = false;
  for await (const s of c.list({ labels: { sdk: "typescript" } })) if (s.id === sb.id) found = true;
  assert.ok(found, "list did not show the sandbox");
  const page = await c.listPage({ state: "running", limit: 1 });
  assert.equal(page.items.length, 1);
  const upd = await sb.update({ labels: { sdk: "typescript", more: "yes" } });
  assert.equal(upd.labels?.more, "yes");
  assert.ok("policy" in (await sb.network()));
  assert.ok(typeof (await sb.usage()).costUsd === "number");
  assert.ok(await sb.metrics());
  assert.ok(await c.usage({ groupBy: "day" }));
  await sb.terminate();
  assert.ok(["terminating", "terminated"].includes((await c.get(sb.id)).info.state));
  await assert.rejects(sb.run("true"));
});

test("await using terminates the sandbox when its block ends", { skip }, async () => {
  const c = client();
  let id = "";
  {
    await using sb = await c.create({ labels: { sdk: "typescript-using" } });
    id = sb.id;
    assert.equal((await sb.run("exit 7")).exitCode, 7);
  }
  assert.ok(["terminating", "terminated"].includes((await c.get(id)).info.state));
});

test("errors carry code, message, details and status", { skip }, async () => {
  const c = client();
  await assert.rejects(c.get("sbx_doesnotexist"), (e: unknown) => {
    assert.ok(e instanceof cove.NotFound);
    assert.equal(e.status, 404);
    assert.ok(e.message);
    return true;
  });
  await assert.rejects(new cove.Client({ url: URL_, apiKey: "cove_nosuchkey" }).get("x"), cove.Unauthenticated);
});

test("output resumes after a cut connection, complete and in order", { skip }, async () => {
  const c = client();
  const proxy = await CuttingProxy.start(URL_);
  try {
    await withSandbox(c, { name: name("ts-stream") }, async (sb) => {
      const cmd = await sb.start("for i in $(seq 1 60); do echo line$i; sleep 0.02; done");
      const via = client(`http://127.0.0.1:${proxy.port}`);
      const seqs: number[] = [];
      let out = "";
      let cut = false;
      for await (const ch of (await (await via.get(sb.id)).command(cmd.id)).output()) {
        if (ch.type === "exit") {
          assert.equal(ch.exitCode, 0);
          break;
        }
        seqs.push(ch.seq);
        out += dec.decode(ch.data);
        if (!cut) {
          proxy.cut(); // the stream breaks after its first chunk
          cut = true;
        }
      }
      assert.ok(proxy.accepted >= 2, "the stream was never reconnected");
      assert.deepEqual(seqs, [...new Set(seqs)].sort((a, b) => a - b), "a chunk came twice or out of order");
      assert.equal(out, Array.from({ length: 60 }, (_, i) => `line${i + 1}\n`).join(""));
    });
  } finally {
    await proxy.close();
  }
});

test("stdin, stdout, stderr, signal", { skip }, async () => {
  const c = client();
  await withSandbox(c, { name: name("ts-stdin") }, async (sb) => {
    const cmd = await sb.start("read a; read b; echo $a-$b; echo e >&2", { stdin: true, tag: "reader" });
    assert.equal(cmd.info.tag, "reader");
    assert.ok((cmd.info.pid ?? 0) > 1, `pid ${cmd.info.pid}`);
    await cmd.write("x\n");
    await cmd.write(enc.encode("y\n"), { eof: true });
    const info = await cmd.wait();
    assert.equal(info.exitCode, 0);
    assert.equal(dec.decode(await cmd.stdout()), "x-y\n");
    assert.equal(dec.decode(await cmd.stderr()), "e\n");

    const cat = await sb.start("cat", { stdin: true });
    await cat.write("piped\n");
    await cat.closeStdin();
    let out = "";
    for await (const ch of cat.output()) if (ch.type !== "exit") out += dec.decode(ch.data);
    assert.equal(out, "piped\n");

    const long = await sb.start("sleep 600");
    await long.signal("KILL");
    const ended = await long.wait();
    assert.notEqual(ended.state, "running");
    assert.ok((await sb.commands()).items.some((x) => x.id === long.id));
  });
});

test("files: versions prevent a lost update; edit, list, move, remove", { skip }, async () => {
  const c = client();
  await withSandbox(c, { name: name("ts-files") }, async (sb) => {
    const p = sb.info.workdir + "/notes.txt";
    const v1 = await sb.files.write(p, "one\n", { ifVersion: "none" });
    await assert.rejects(sb.files.write(p, "again\n", { ifVersion: "none" }), cove.PreconditionFailed);
    const v2 = await sb.files.write(p, "two\n", { ifVersion: v1.version });
    await assert.rejects(sb.files.write(p, "lost update\n", { ifVersion: v1.version }), cove.PreconditionFailed);
    const got = await sb.files.read(p);
    assert.deepEqual([got.text, got.version], ["two\n", v2.version]);
    assert.equal(got.sha256.length, 32);
    const v3 = await sb.files.edit(p, [{ old: "two", new: "three" }], { ifVersion: v2.version });
    await assert.rejects(sb.files.edit(p, [{ old: "absent", new: "x" }]), cove.Conflict);
    await assert.rejects(sb.files.edit(p, [{ old: "three", new: "x" }], { ifVersion: v2.version }), cove.PreconditionFailed);
    assert.equal(await sb.files.readText(p), "three\n");
    assert.equal((await sb.files.stat(p)).version, v3.version);
    const bin = new Uint8Array(256).map((_, i) => i);
    await sb.files.write(sb.info.workdir + "/bin", bin, { mode: "0600" });
    assert.deepEqual((await sb.files.read(sb.info.workdir + "/bin")).data, bin);
    await sb.files.mkdir(sb.info.workdir + "/d");
    await sb.files.move(p, sb.info.workdir + "/d/n.txt");
    assert.deepEqual((await sb.files.list(sb.info.workdir + "/d")).map((e) => e.name), ["n.txt"]);
    await sb.files.remove(sb.info.workdir + "/d", { recursive: true });
    assert.equal(await sb.files.exists(sb.info.workdir + "/d"), false);
  });
});

test("files: a recursive watch sees a file in a folder made after it began; after= resumes without loss", { skip }, async () => {
  const c = client();
  await withSandbox(c, { name: name("ts-watch") }, async (sb) => {
    const d = sb.info.workdir + "/watched";
    await sb.files.mkdir(d);
    // The watch is in place once the server answers; until a record is
    // seen, keep making new folders with a file in them.
    let seen = false;
    const writer = (async () => {
      for (let i = 0; i < 100 && !seen; i++) {
        await sb.run(`mkdir -p ${d}/n${i} && echo hi > ${d}/n${i}/f.txt`);
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    let first: cove.FileEvent | undefined;
    for await (const ev of sb.files.watch(d, { recursive: true })) {
      if (ev.type === "write" && (ev.path ?? "").endsWith("/f.txt") && ev.entry?.size === 3) {
        first = ev;
        break;
      }
    }
    seen = true;
    await writer;
    assert.ok(first && (first.path ?? "").startsWith(d + "/n"), JSON.stringify(first));
    await sb.files.write(d + "/later.txt", "later");
    const seqs: number[] = [];
    for await (const ev of sb.files.watch(d, { recursive: true, after: first!.seq })) {
      assert.notEqual(ev.type, "dropped", JSON.stringify(ev));
      seqs.push(ev.seq);
      if (ev.path === d + "/later.txt" && ev.type === "create") break;
    }
    assert.deepEqual(seqs, seqs.map((_, i) => first!.seq + 1 + i));
    await assert.rejects(sb.files.watch(d + "/missing").next(), cove.NotFound);
  });
});

test("a download whose digest does not match is refused", async () => {
  // A fetch that answers a file with a wrong Repr-Digest.
  const fake = (async () => new Response("tampered", {
    status: 200, headers: { ETag: '"v1"', "Repr-Digest": "sha-256=:" + Buffer.alloc(32).toString("base64") + ":" },
  })) as unknown as typeof fetch;
  const c = new cove.Client({ url: "http://127.0.0.1:9", apiKey: "k", fetch: fake });
  const sb = new cove.Sandbox(c, { id: "sbx_x", name: "x", teamId: "t", template: "", state: "running", workdir: "/" } as cove.SandboxInfo);
  await assert.rejects(sb.files.read("/f"), cove.DigestMismatch);
});

test("a folder round trip keeps modes, symlinks, empty dirs, long names", { skip }, async () => {
  const tmp = await mkdtemp(join(tmpdir(), "cove-ts-"));
  try {
    const src = join(tmp, "src");
    const back = join(tmp, "back");
    await makeTree(src);
    const c = client();
    await withSandbox(c, { name: name("ts-dir") }, async (sb) => {
      const dest = sb.info.workdir + "/project";
      await sb.files.uploadDir(src, dest);
      assert.equal((await sb.run("./run.sh", { cwd: dest })).stdout, "ran\n");
      assert.equal((await sb.run("cat link.py", { cwd: dest })).stdout, "X = 1\n");
      await sb.files.downloadDir(dest, back);
    });
    assert.deepEqual(await tree(back), await tree(src));
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
});

test("events: a page, then the stream from its last one", { skip }, async () => {
  const c = client();
  await withSandbox(c, { name: name("ts-events") }, async (sb) => {
    const page = await c.events({ sandbox: sb.id });
    assert.ok(page.items.map((e) => e.type).includes("sandbox.running"));
    const last = page.items[page.items.length - 1].id;
    await sb.run("true");
    const seen: string[] = [];
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 60_000);
    for await (const ev of c.streamEvents({ sandbox: sb.id, after: last, signal: ctl.signal })) {
      seen.push(ev.type);
      if (ev.type === "command.exited") break;
    }
    clearTimeout(timer);
    assert.ok(seen.indexOf("command.started") >= 0 && seen.indexOf("command.started") < seen.indexOf("command.exited"), String(seen));
  });
});

test("attach with ws: input in, output and exit out", { skip }, async () => {
  const c = client();
  await withSandbox(c, { name: name("ts-attach") }, async (sb) => {
    const cmd = await sb.start("read line; echo got $line", { stdin: true });
    const a = await cmd.attach();
    a.send("hello\n");
    let out = "";
    for await (const b of a) out += dec.decode(b);
    assert.equal(out, "got hello\n");
    assert.equal(a.exit?.exitCode, 0);
    a.close();
  });
});

test("attach takes an AbortSignal: aborted first it fails Cancelled; aborted later it closes and the command goes on", { skip }, async () => {
  const c = client();
  await withSandbox(c, { name: name("ts-attach-abort") }, async (sb) => {
    const cmd = await sb.start("read line; echo got $line", { stdin: true });
    const early = new AbortController();
    early.abort();
    await assert.rejects(cmd.attach({ signal: early.signal }), (e: any) => e.code === "cancelled");
    const ac = new AbortController();
    const a = await cmd.attach({ signal: ac.signal });
    ac.abort();
    let out = "";
    for await (const b of a) out += dec.decode(b);
    assert.equal(out, "");
    const again = await cmd.attach();
    again.send("still here\n");
    let rest = "";
    for await (const b of again) rest += dec.decode(b);
    assert.equal(rest, "got still here\n");
  });
});

test("a pty command sees its size, and a resize through attach", { skip }, async () => {
  const c = client();
  await withSandbox(c, { name: name("ts-pty") }, async (sb) => {
    const sized = await sb.start("stty size", { pty: { cols: 100, rows: 30 } });
    await sized.wait();
    assert.match(dec.decode(await sized.stdout()), /30 100/);
    const cmd = await sb.start("read x; stty size", { pty: { cols: 80, rows: 24 } });
    const a = await cmd.attach();
    a.resize(120, 40);
    await new Promise((r) => setTimeout(r, 300));
    a.send("go\r");
    let out = "";
    for await (const b of a) out += dec.decode(b);
    assert.match(out, /40 120/);
    assert.equal(a.exit?.exitCode, 0);
  });
});

test("attach with a ticket, as a browser does; a used ticket is refused", { skip }, async () => {
  const c = client();
  await withSandbox(c, { name: name("ts-ticket") }, async (sb) => {
    const cmd = await sb.start("read line; echo got $line", { stdin: true });
    const a = await cmd.attach({ ticket: true });
    a.send("ticket\n");
    let out = "";
    for await (const b of a) out += dec.decode(b);
    assert.equal(out, "got ticket\n");

    // A ticket is bound to one path and used once.
    const long = await sb.start("sleep 60", { stdin: true });
    const path = `/v1/sandboxes/${sb.id}/commands/${long.id}/attach`;
    const t = await c.createTicket(path);
    assert.ok(t.ticket.startsWith("tkt_"));
    assert.equal(t.path, path);
    const url = URL_.replace(/^http/, "ws") + path + "?ticket=" + t.ticket;
    assert.equal(await openStatus(url), 101);
    assert.notEqual(await openStatus(url), 101);
    await long.signal("KILL");
  });
});

/** 101 when a WebSocket opens (then closed), else the HTTP status. */
async function openStatus(url: string): Promise<number> {
  const { default: WS } = await import("ws");
  return new Promise((resolve, reject) => {
    const ws = new WS(url);
    ws.on("open", () => { ws.close(); resolve(101); });
    ws.on("unexpected-response", (_req, res) => { resolve(res.statusCode ?? 0); ws.terminate(); });
    ws.on("error", reject);
  });
}

test("secrets: stored, listed, redacted, deleted", { skip }, async () => {
  const c = client();
  const sname = name("tok").replace(/-/g, "_");
  await c.putSecret(sname, "s3cr3t-value-for-tests");
  assert.ok((await c.listSecrets()).some((x) => x.name === sname));
  assert.ok(!("value" in (await c.getSecret(sname))));
  await withSandbox(c, { name: name("ts-secret"), secrets: { TOKEN: sname } }, async (sb) => {
    assert.equal((await sb.run("echo $TOKEN")).stdout, `[secret:${sname}]\n`);
  });
  await c.deleteSecret(sname);
  await assert.rejects(c.getSecret(sname), cove.NotFound);
});

test("teams, keys and tickets", { skip }, async () => {
  const c = client();
  const t = await c.createTeam(name("ts-team"));
  assert.ok(t.apiKey);
  assert.ok((await c.listTeams()).some((x) => x.id === t.team.id));
  const updated = await c.updateTeam(t.team.id, { spendLimitUsd: 12.5 });
  assert.equal(updated.id, t.team.id);
  const k = await c.createKey(t.team.id);
  const other = new cove.Client({ url: URL_, apiKey: k.apiKey });
  await assert.rejects(other.get("nothing-here"), cove.NotFound);
  await c.revokeKey(k.keyId);
  await assert.rejects(other.listPage(), cove.Unauthenticated);
  const doc = await c.openapi();
  assert.ok(doc.paths["/v1/tickets"]);
});

/** A tar.gz of raw entries, names and link targets as given (no tool
 * would write a hostile one). */
function rawTarGz(entries: Array<{ name: string; type?: "0" | "2"; link?: string; data?: string }>): Uint8Array {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const data = Buffer.from(e.data ?? "");
    const h = Buffer.alloc(512);
    h.write(e.name, 0, 100);
    h.write("0000644\0", 100);
    h.write("0000000\0", 108);
    h.write("0000000\0", 116);
    h.write(data.length.toString(8).padStart(11, "0") + "\0", 124);
    h.write("00000000000\0", 136);
    h.write(e.type ?? "0", 156);
    h.write(e.link ?? "", 157, 100);
    h.write("ustar\0" + "00", 257);
    h.fill(" ", 148, 156);
    let sum = 0;
    for (const b of h) sum += b;
    h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
    blocks.push(h, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return new Uint8Array(gzipSync(Buffer.concat(blocks)));
}

test("unpack refuses an archive whose entries leave the folder, and writes nothing of it", async () => {
  const { unpack } = await import("@cove-dev/sdk");
  const { readdir, stat } = await import("node:fs/promises");
  const tmp = await mkdtemp(join(tmpdir(), "cove-ts-evil-"));
  try {
    const cases = [
      [{ name: "ok.txt", data: "fine" }, { name: "../evil.txt", data: "out" }],
      [{ name: "ok.txt", data: "fine" }, { name: "a/../../evil.txt", data: "out" }],
      [{ name: "/tmp/evil-" + name("abs"), data: "out" }],
      [{ name: "link", type: "2" as const, link: "../../etc" }, { name: "link/passwd", data: "out" }],
      [{ name: "link", type: "2" as const, link: "/etc" }],
    ];
    for (const [i, entries] of cases.entries()) {
      const dest = join(tmp, "out" + i);
      await assert.rejects(unpack(rawTarGz(entries), dest), cove.InvalidArgument, JSON.stringify(entries));
      assert.deepEqual(await readdir(dest), [], "nothing of a refused archive is written");
    }
    await assert.rejects(stat(join(tmp, "evil.txt")));
    await unpack(rawTarGz([{ name: "in/ok.txt", data: "fine" }, { name: "in/link", type: "2", link: "ok.txt" }]), join(tmp, "good"));
    assert.equal(await readFile(join(tmp, "good", "in", "link"), "utf8"), "fine");
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
});

test("tar.gz: a folder packed and unpacked locally is the same; an entry leaving the folder is refused", async () => {
  const { packDir, unpack } = await import("@cove-dev/sdk");
  const { symlink } = await import("node:fs/promises");
  const tmp = await mkdtemp(join(tmpdir(), "cove-ts-tar-"));
  try {
    await makeTree(join(tmp, "src"));
    await unpack(await packDir(join(tmp, "src")), join(tmp, "back"));
    assert.deepEqual(await tree(join(tmp, "back")), await tree(join(tmp, "src")));
    await symlink("../../etc/passwd", join(tmp, "src", "escape"));
    await assert.rejects(packDir(join(tmp, "src")), cove.InvalidArgument);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
});

test("a command wakes an asleep sandbox; wake: false refuses and leaves it asleep", { skip }, async () => {
  const c = client();
  await withSandbox(c, { name: name("ts-wake") }, async (sb) => {
    await sb.run("echo kept > /workspace/kept.txt");
    await sb.sleep();
    await assert.rejects(sb.run("true", { wake: false }), cove.Conflict);
    await assert.rejects(sb.start("true", { wake: false }), cove.Conflict);
    assert.equal((await c.get(sb.id)).info.state, "asleep");
    assert.equal((await sb.run("cat /workspace/kept.txt")).stdout, "kept\n");
    assert.equal((await c.get(sb.id)).info.state, "running");
    await sb.sleep();
    const cmd = await sb.start("cat /workspace/kept.txt");
    assert.equal((await cmd.wait()).exitCode, 0);
    assert.equal(dec.decode(await cmd.stdout()), "kept\n");
  });
});
