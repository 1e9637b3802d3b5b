// An agent trying fixes side by side: store a project once as an asset,
// start one sandbox per candidate fix from it (all at once), run the tests
// in each, keep what passed.
//
//     COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... node try-fixes-from-asset.mjs
//
// It imports @cove-dev/sdk, installed from this repository (see
// examples/typescript/README.md).

import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Client, assetSource } from "@cove-dev/sdk";

const CANDIDATES = ["a + b", "a * b"];

const project = await mkdtemp(join(tmpdir(), "try-fixes-"));
await writeFile(join(project, "calc.py"), "def add(a, b):\n    return a - b\n");
await writeFile(join(project, "test_calc.py"),
  "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n" +
  "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n");

const client = new Client();

async function attempt(asset, fix) {
  // The asset lands in the workdir before the sandbox runs.
  const sb = await client.create({ source: assetSource(asset), labels: { example: "try-fixes" } });
  try {
    await sb.files.edit(sb.info.workdir + "/calc.py", [{ old: "a - b", new: fix }]);
    const r = await sb.run("python3 -B -m unittest -q", { cwd: sb.info.workdir });
    console.log(`${JSON.stringify(fix)}: exit ${r.exitCode}`);
    return r.exitCode === 0;
  } finally {
    await sb.terminate();
  }
}

let passed = [];
const asset = await client.createAssetFromDir(project, { name: "calc-project" });
console.log("asset", asset.id, asset.size, "bytes, sha-256", asset.sha256.slice(0, 12));
try {
  passed = await Promise.all(CANDIDATES.map((fix) => attempt(asset, fix)));
} finally {
  await client.deleteAsset(asset.id);
  await rm(project, { recursive: true, force: true });
}
console.log("fixes that pass:", CANDIDATES.filter((_, i) => passed[i]));
process.exit(passed[0] === true && passed[1] === false ? 0 : 1);
