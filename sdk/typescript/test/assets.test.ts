// Assets, previews, templates and the key's own team against a real cove
// server (COVE_URL, COVE_API_KEY); skipped without one.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import * as cove from "@cove-dev/sdk";
import { packDir, unpack } from "@cove-dev/sdk";

import { KEY, URL_, makeTree, name, skip, tree } from "./helpers.js";



function client(): cove.Client {
  return new cove.Client({ url: URL_, apiKey: KEY });
}

function hex(b: Uint8Array): string {
  return createHash("sha256").update(b).digest("hex");
}

function streamOf(...pieces: Uint8Array[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(c) {
      for (const p of pieces) c.enqueue(p);
      c.close();
    },
  });
}

async function withTmp<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), "cove-ts-asset-"));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test("assets: bytes, streams and a file are one asset; listed, read, downloaded, deleted", { skip }, async () => {
  await withTmp(async (tmp) => {
    const c = client();
    // Unique content per run, so that no earlier run's asset answers.
    await mkdir(join(tmp, "src", "dir"), { recursive: true });
    await writeFile(join(tmp, "src", "hello.txt"), "hello " + randomBytes(8).toString("hex") + "\n");
    await writeFile(join(tmp, "src", "dir", "x.txt"), "x\n");
    const data = await packDir(join(tmp, "src"));
    const file = join(tmp, "a.tar.gz");
    await writeFile(file, data);

    const a = await c.createAsset(data, { name: name("ts-bytes") });
    try {
      assert.ok(a.id.startsWith("ast_"), a.id);
      assert.equal(a.size, data.length);
      assert.equal(a.sha256, hex(data));
      // The same bytes, however sent, are the same asset.
      assert.equal((await c.createAsset(streamOf(data.subarray(0, 5), data.subarray(5)))).id, a.id);
      assert.equal((await c.createAsset(streamOf(data), { sha256: a.sha256 })).id, a.id);
      assert.equal((await c.createAssetFromFile(file)).id, a.id);
      // A digest that is not the bytes' is refused, and nothing is stored.
      await assert.rejects(c.createAsset(streamOf(data), { sha256: "0".repeat(64) }), cove.Unprocessable);
      await assert.rejects(c.createAsset(streamOf(data), { sha256: "nothex" }), cove.InvalidArgument);
      await assert.rejects(c.createAsset("not an archive at all"), (e: unknown) => {
        assert.ok(e instanceof cove.CoveError && [400, 422].includes(e.status), String(e));
        return true;
      });

      const got = await c.getAsset(a.id);
      assert.deepEqual([got.id, got.name, got.sha256], [a.id, a.name, a.sha256]);
      let listed = false;
      for await (const x of c.listAssets()) if (x.id === a.id) listed = true;
      assert.ok(listed, "listAssets did not show the asset");
      assert.equal((await c.listAssetsPage({ limit: 1 })).items.length, 1);
      assert.deepEqual(await c.readAsset(a.id), data);
      const back = join(tmp, "back.tar.gz");
      await c.downloadAsset(a.id, back);
      assert.deepEqual(new Uint8Array(await readFile(back)), data);
    } finally {
      await c.deleteAsset(a.id);
    }
    await assert.rejects(c.getAsset(a.id), cove.NotFound);
    await assert.rejects(c.readAsset(a.id), cove.NotFound);
  });
});

test("an asset as a sandbox's source; a sandbox's folder saved as an asset", { skip }, async () => {
  await withTmp(async (tmp) => {
    const c = client();
    const src = join(tmp, "src");
    await makeTree(src);
    const a = await c.createAssetFromDir(src, { name: name("ts-dir") });
    let saved: cove.Asset | undefined;
    try {
      const sb = await c.create({ name: name("ts-from-asset"), source: cove.assetSource(a) });
      try {
        assert.equal(sb.info.source?.assetId, a.id);
        assert.equal((await sb.run("./run.sh", { cwd: sb.info.workdir })).stdout, "ran\n");
        await sb.files.downloadDir(sb.info.workdir, join(tmp, "back"));
        await sb.files.write(sb.info.workdir + "/added.txt", "added\n");
        saved = await sb.saveAsset(sb.info.workdir, { name: name("ts-saved") });
      } finally {
        await sb.terminate().catch(() => {});
      }
      assert.deepEqual(await tree(join(tmp, "back")), await tree(src));
      assert.notEqual(saved.id, a.id);
      await unpack(await c.readAsset(saved.id), join(tmp, "saved"));
      assert.equal(await readFile(join(tmp, "saved", "added.txt"), "utf8"), "added\n");
      assert.equal(await readFile(join(tmp, "saved", "src", "pkg", "mod.py"), "utf8"), "X = 1\n");
    } finally {
      await c.deleteAsset(a.id);
      if (saved) await c.deleteAsset(saved.id);
    }
  });
});

test("an asset whose digest does not match is refused, and its download removed", async () => {
  const fake = (async () => new Response("tampered", {
    status: 200, headers: { "Repr-Digest": "sha-256=:" + Buffer.alloc(32).toString("base64") + ":" },
  })) as unknown as typeof fetch;
  const c = new cove.Client({ url: "http://127.0.0.1:9", apiKey: "k", fetch: fake });
  await assert.rejects(c.readAsset("ast_x"), cove.DigestMismatch);
  await withTmp(async (tmp) => {
    const out = join(tmp, "x.tar.gz");
    await assert.rejects(c.downloadAsset("ast_x", out), cove.DigestMismatch);
    await assert.rejects(stat(out), "a download that failed its check left its file");
  });
});

test("templates and the key's own team", { skip }, async () => {
  const c = client();
  const me = await c.teamMe();
  assert.equal(me.admin, true);
  assert.ok(me.team?.id);
  assert.ok(me.admitted?.includes("preview"), String(me.admitted));
  const managed = (await c.templates()).find((t) => t.name === "managed");
  assert.equal(managed?.status, "ready");
});

/** A GET to a preview's own host, sent to the server's address (the test
 * resolves no preview domain): the Host header names the preview. */
function viaHost(previewUrl: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const api = new URL(URL_);
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: api.hostname, port: api.port, path, method: "GET",
      headers: { ...headers, host: new URL(previewUrl).host },
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString() }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

// Waits (in the sandbox) until the app answers, so that the preview is
// asked only once something listens.
const SERVING = "for i in $(seq 1 200); do curl -fs -o /dev/null http://127.0.0.1:8000/ && exit 0; sleep 0.05; done; exit 1";

test("previews: a private one at its own host with its token; listed; deleted", { skip }, async () => {
  const c = client();
  const sb = await c.create({ name: name("ts-preview") });
  try {
    await sb.files.write(sb.info.workdir + "/index.html", "hello preview\n");
    await sb.start("exec python3 -m http.server 8000", { cwd: sb.info.workdir });
    assert.equal((await sb.run(SERVING)).exitCode, 0);
    const p = await sb.preview(8000);
    assert.ok(p.id!.startsWith("prv_") && p.visibility === "private" && p.token, JSON.stringify(p));
    assert.equal(new URL(p.url!).hostname, `8000-${sb.id}.localhost`, p.url!);
    assert.equal((p as Record<string, unknown>).path_url, undefined);
    const ok = await viaHost(p.url!, "/index.html", { "Cove-Preview-Token": p.token! });
    assert.deepEqual([ok.status, ok.text], [200, "hello preview\n"]);
    const denied = await viaHost(p.url!, "/index.html");
    assert.equal(denied.status, 401);
    const listed = await sb.previews();
    assert.deepEqual(listed.map((x) => x.id), [p.id!]);
    assert.equal(listed[0].token, undefined);
    assert.equal(listed[0].url, p.url!);
    await assert.rejects(sb.preview(8000), cove.Conflict);
    await sb.deletePreview(p.id!);
    assert.deepEqual(await sb.previews(), []);
    await assert.rejects(sb.deletePreview(p.id!), cove.NotFound);
  } finally {
    await sb.terminate().catch(() => {});
  }
});



test("folder and file uploads are streamed with the digest of what they send", async () => {
  const seen: Array<[string, boolean, boolean]> = [];
  const fake = (async (u: URL, init: RequestInit) => {
    const streamed = init.body instanceof ReadableStream;
    const body = new Uint8Array(await new Response(init.body).arrayBuffer());
    const want = "sha-256=:" + createHash("sha256").update(body).digest("base64") + ":";
    seen.push([new URL(u).pathname, (init.headers as Record<string, string>)["Repr-Digest"] === want, streamed]);
    return new Response(JSON.stringify({ id: "ast_x" }), { status: 200 });
  }) as unknown as typeof fetch;
  const c = new cove.Client({ url: "http://127.0.0.1:9", apiKey: "k", fetch: fake });
  await withTmp(async (tmp) => {
    await makeTree(join(tmp, "src"));
    await writeFile(join(tmp, "a.tar.gz"), await packDir(join(tmp, "src")));
    await c.createAssetFromDir(join(tmp, "src"));
    await c.createAssetFromFile(join(tmp, "a.tar.gz"));
    await new cove.Files(c, "sbx_x").uploadDir(join(tmp, "src"), "/workspace/p");
  });
  assert.deepEqual(seen, [
    ["/v1/assets", true, true], ["/v1/assets", true, true], ["/v1/sandboxes/sbx_x/files/archive", true, true],
  ]);
});
