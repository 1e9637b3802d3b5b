// The package as a CommonJS program loads it, with require: the same
// classes, the same errors, and (with a server) the same calls.

const { test } = require("node:test");
const assert = require("node:assert/strict");

const cove = require("@cove-dev/sdk");

const URL_ = process.env.COVE_URL || "";
const KEY = process.env.COVE_API_KEY || "";
const skip = URL_ && KEY ? false : "COVE_URL and COVE_API_KEY name no server";

test("require loads the CommonJS build", () => {
  for (const name of ["Client", "Sandbox", "CoveError", "Unavailable", "NotFound", "packDir", "listUpload"]) {
    assert.equal(typeof cove[name], "function", name);
  }
  assert.ok(new cove.NotFound("x") instanceof cove.CoveError);
  assert.ok(require.resolve("@cove-dev/sdk").includes("/dist/cjs/"), require.resolve("@cove-dev/sdk"));
});

test("a transport error under require is the SDK's own error", async () => {
  const c = new cove.Client({ url: "http://127.0.0.1:9", apiKey: "k", maxRetries: 0 });
  await assert.rejects(c.get("x"), (e) => e instanceof cove.Unavailable && e.code === "unavailable" && e.status === 0);
});

test("a sandbox under require: run, camelCase results, await-using disposal", { skip }, async () => {
  const c = new cove.Client({ url: URL_, apiKey: KEY });
  const sb = await c.create({ labels: { sdk: "typescript-cjs" } });
  try {
    const r = await sb.run("echo hi; exit 4");
    assert.equal(r.stdout, "hi\n");
    assert.equal(r.exitCode, 4);
    assert.equal(typeof sb.info.createdAt, "string");
  } finally {
    await sb[Symbol.asyncDispose]();
  }
  assert.ok(["terminating", "terminated"].includes((await c.get(sb.id)).info.state));
});
