// The shared .coveignore vectors (sdk/testdata/coveignore.json, the same
// file the CLI, Go and Python run): every case's folder is made, and what
// an upload of it sends must be exactly the files the case expects.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { IGNORE_FILE, listUpload } from "@cove-dev/sdk";

interface Case {
  name: string;
  ignore: Record<string, string>;
  files: Record<string, boolean>;
}

// dist/test/ -> sdk/testdata, unless COVE_TESTDATA names the folder.
const here = dirname(fileURLToPath(import.meta.url));
const file = join(process.env.COVE_TESTDATA || resolve(here, "..", "..", "..", "testdata"), "coveignore.json");
const cases: Case[] = JSON.parse(await readFile(file, "utf8")).cases;

test("the shared vectors are there", () => {
  assert.ok(cases.length >= 8, `${file} has ${cases.length} cases`);
});

for (const c of cases) {
  test(`.coveignore: ${c.name}`, async () => {
    const root = await mkdtemp(join(tmpdir(), "cove-ignore-"));
    try {
      for (const [p, text] of [...Object.entries(c.ignore), ...Object.keys(c.files).map((p) => [p, "x\n"] as const)]) {
        await mkdir(dirname(join(root, p)), { recursive: true });
        await writeFile(join(root, p), text);
      }
      const sent = new Set(await listUpload(root));
      for (const [p, want] of Object.entries(c.files)) {
        assert.equal(sent.has(p), want, `${p}: ${want ? "should be uploaded" : "should be left out"}`);
      }
      for (const p of Object.keys(c.ignore)) assert.ok(sent.has(p), `${p} (an ${IGNORE_FILE}) is always uploaded`);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
}
