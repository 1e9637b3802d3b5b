// An agent's loop: send a project to a sandbox, run its tests, read the
// failing file, fix it, run the tests again.
//
//     COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... node fix-a-test.mjs
//
// It imports @cove-dev/sdk, installed from this repository (see
// examples/typescript/README.md).

import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Client } from "@cove-dev/sdk";

const project = await mkdtemp(join(tmpdir(), "fix-a-test-"));
await writeFile(join(project, "calc.py"), "def add(a, b):\n    return a - b\n");
await writeFile(join(project, "test_calc.py"),
  "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n" +
  "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n");

const client = new Client();
const sb = await client.create({ labels: { example: "fix-a-test" } });
let ok = false;
try {
  const work = sb.info.workdir + "/project";
  await sb.files.uploadDir(project, work);

  // -B: no bytecode cache, whose mtime check (seconds) could miss an edit
  // of the same size made within the same second.
  const first = await sb.run("python3 -B -m unittest -q", { cwd: work });
  console.log("tests before the fix: exit", first.exitCode);

  const source = await sb.files.read(work + "/calc.py");
  process.stdout.write(source.text);
  await sb.files.edit(work + "/calc.py", [{ old: "a - b", new: "a + b" }], { ifVersion: source.version });

  const second = await sb.run("python3 -B -m unittest -q", { cwd: work });
  console.log("tests after the fix: exit", second.exitCode);
  ok = first.exitCode !== 0 && second.exitCode === 0;
} finally {
  await sb.terminate();
  await rm(project, { recursive: true, force: true });
}
process.exit(ok ? 0 : 1);
