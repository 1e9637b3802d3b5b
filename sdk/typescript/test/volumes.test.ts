// Volumes through the SDK: what the calls send and how their answers and
// errors come back, against a small HTTP server on loopback; then a volume
// shared by two sandboxes of a real server (COVE_URL, COVE_API_KEY).

import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, IncomingMessage, Server, ServerResponse } from "node:http";

import * as cove from "@cove-dev/sdk";
import { KEY, URL_, name, skip } from "./helpers.js";

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

type Answer = [number, unknown];

/** An HTTP server on a free loopback port answering the nth request with
 * answers[n] (the last one once they run out); it records what it was sent. */
async function fakeServer(answers: Answer[]): Promise<{ url: string; seen: Seen[]; close: () => Promise<void> }> {
  const seen: Seen[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString() });
      const [status, body] = answers[Math.min(seen.length - 1, answers.length - 1)];
      if (body === null) {
        res.writeHead(status);
        res.end();
        return;
      }
      res.writeHead(status, { "Content-Type": "application/json" });
      res.end(JSON.stringify(body));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`, seen,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

const volume = {
  id: "vol_1", team_id: "team_1", name: "cache", size_mib: 64, used_bytes: 4096, sandboxes: ["sbx_1"],
  created_at: "2026-12-03T11:00:00Z",
};
const sandbox = {
  id: "sbx_1", name: "x", team_id: "team_1", state: "running", workdir: "/home/user",
  volumes: [{ name: "cache", path: "/cache", read_only: true, volume_id: "vol_1" }],
};
const fast = 2; // maxRetries

test("createVolume posts name and size_mib with a key kept across a retry, and answers the volume", async () => {
  const s = await fakeServer([[503, { error: { code: "unavailable", message: "busy" } }], [201, volume]]);
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k", maxRetries: fast });
    const v: cove.Volume = await c.createVolume("cache", 64);
    assert.deepEqual([v.id, v.name, v.sizeMib, v.usedBytes, v.sandboxes, v.teamId], ["vol_1", "cache", 64, 4096, ["sbx_1"], "team_1"]);
    assert.deepEqual(s.seen.map((x) => [x.method, x.url]), [["POST", "/v1/volumes"], ["POST", "/v1/volumes"]]);
    assert.deepEqual(JSON.parse(s.seen[0].body), { name: "cache", size_mib: 64 });
    const key = s.seen[0].headers["idempotency-key"];
    assert.ok(key);
    assert.equal(s.seen[1].headers["idempotency-key"], key);
  } finally {
    await s.close();
  }
});

test("getVolume and deleteVolume escape the ref", async () => {
  const s = await fakeServer([[200, volume], [204, null]]);
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k" });
    assert.equal((await c.getVolume("cache")).id, "vol_1");
    assert.equal(await c.deleteVolume("vol/1"), undefined);
    assert.deepEqual(s.seen.map((x) => [x.method, x.url]), [["GET", "/v1/volumes/cache"], ["DELETE", "/v1/volumes/vol%2F1"]]);
  } finally {
    await s.close();
  }
});

test("listVolumes follows the cursor; listVolumesPage answers one page", async () => {
  const pages: Answer[] = [
    [200, { items: [volume], next_cursor: "c1" }],
    [200, { items: [{ ...volume, id: "vol_2", name: "data" }], next_cursor: "" }],
  ];
  const s = await fakeServer(pages);
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k" });
    const ids: string[] = [];
    for await (const v of c.listVolumes({ limit: 1 })) ids.push(v.id);
    assert.deepEqual(ids, ["vol_1", "vol_2"]);
    assert.deepEqual(s.seen.map((x) => x.url), ["/v1/volumes?limit=1", "/v1/volumes?limit=1&cursor=c1"]);
  } finally {
    await s.close();
  }
  const one = await fakeServer(pages);
  try {
    const page = await new cove.Client({ url: one.url, apiKey: "k" }).listVolumesPage({ limit: 1 });
    assert.deepEqual([page.items.map((v) => v.name), page.nextCursor], [["cache"], "c1"]);
  } finally {
    await one.close();
  }
});

test("deleteVolume of a mounted volume throws Conflict with its details", async () => {
  const s = await fakeServer([[409, { error: { code: "conflict", message: "volume vol_1 is mounted by sbx_1", details: { sandboxes: ["sbx_1"] } } }]]);
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k", maxRetries: fast });
    await assert.rejects(c.deleteVolume("cache"), (e: unknown) => {
      assert.ok(e instanceof cove.Conflict);
      assert.equal(e.status, 409);
      assert.deepEqual(e.details, { sandboxes: ["sbx_1"] });
      return true;
    });
  } finally {
    await s.close();
  }
});

test("create sends volumes (snake_case on the wire) and the sandbox shows its mounts", async () => {
  const s = await fakeServer([[201, sandbox]]);
  try {
    const c = new cove.Client({ url: s.url, apiKey: "k" });
    const sb = await c.create({ volumes: [{ name: "cache", path: "/cache", readOnly: true }, { name: "data", path: "/data" }] });
    assert.deepEqual(JSON.parse(s.seen[0].body).volumes, [
      { name: "cache", path: "/cache", read_only: true }, { name: "data", path: "/data" },
    ]);
    const m: cove.VolumeMount = sb.info.volumes![0];
    assert.deepEqual([m.name, m.path, m.readOnly, m.volumeId], ["cache", "/cache", true, "vol_1"]);
  } finally {
    await s.close();
  }
});

// Against the real server.

function client(): cove.Client {
  return new cove.Client({ url: URL_, apiKey: KEY });
}

test("a volume is shared by two sandboxes and outlives them", { skip }, async () => {
  const c = client();
  const vol = await c.createVolume(name("vol"), 64);
  try {
    assert.ok(vol.id.startsWith("vol_"));
    assert.deepEqual([vol.sizeMib, vol.sandboxes], [64, []]);
    await assert.rejects(c.createVolume(vol.name, 64), cove.Conflict);
    const a = await c.create({ volumes: [{ name: vol.name, path: "/shared" }] });
    const b = await c.create({ volumes: [{ name: vol.id, path: "/ro", readOnly: true }] });
    try {
      assert.deepEqual(a.info.volumes?.map((m) => [m.name, m.path, m.readOnly ?? false, m.volumeId]), [[vol.name, "/shared", false, vol.id]]);
      assert.equal(b.info.volumes?.[0].readOnly, true);
      assert.equal((await a.run("echo from-a > /shared/note")).exitCode, 0);
      assert.equal((await b.run("cat /ro/note")).stdout, "from-a\n");
      assert.notEqual((await b.run("touch /ro/other")).exitCode, 0);
      assert.deepEqual([...(await c.getVolume(vol.name)).sandboxes].sort(), [a.id, b.id].sort());
      let found = false;
      for await (const v of c.listVolumes()) if (v.id === vol.id) found = true;
      assert.ok(found, "listVolumes did not show the volume");
      await assert.rejects(c.deleteVolume(vol.id), (e: unknown) => {
        assert.ok(e instanceof cove.Conflict);
        const said = e.message + JSON.stringify(e.details);
        assert.ok(said.includes(a.id) && said.includes(b.id), said);
        return true;
      });
    } finally {
      await a.terminate().catch(() => {});
      await b.terminate().catch(() => {});
    }
    assert.equal((await a.wait("terminated")).state, "terminated");
    assert.equal((await b.wait("terminated")).state, "terminated");
    const d = await c.create({ volumes: [{ name: vol.name, path: "/again" }] });
    try {
      assert.equal((await d.run("cat /again/note")).stdout, "from-a\n");
    } finally {
      await d.terminate().catch(() => {});
    }
    await d.wait("terminated");
    await c.deleteVolume(vol.id);
    await assert.rejects(c.getVolume(vol.id), cove.NotFound);
    await assert.rejects(c.create({ volumes: [{ name: vol.name, path: "/gone" }] }), cove.NotFound);
  } finally {
    await c.deleteVolume(vol.id).catch(() => {});
  }
});

test("bad volume input is InvalidArgument", { skip }, async () => {
  const c = client();
  await assert.rejects(c.createVolume("Not A Name", 64), cove.InvalidArgument);
  await assert.rejects(c.createVolume(name("vol"), 1), cove.InvalidArgument);
});
