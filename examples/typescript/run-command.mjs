// Run a command in a sandbox and read its exit code and output: a shell
// string, then a program and its arguments with no shell.
//
//     COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... node run-command.mjs

import { Client } from "@cove-dev/sdk";

const client = new Client();
// (TypeScript and Node 24 can write `await using sb = …` instead of
// try/finally: Symbol.asyncDispose terminates the sandbox.)
const sb = await client.create({ labels: { example: "run-command" } });
try {
  const r = await sb.run("echo hello from $(uname -s); echo oops >&2; exit 3");
  console.log("exit code:", r.exitCode);
  console.log("stdout:", r.stdout.trim());
  console.log("stderr:", r.stderr.trim());

  const py = await sb.run(undefined, { argv: ["python3", "-c", "print(6 * 7)"], timeoutS: 30 });
  console.log("python says", py.stdout.trim());

  process.exitCode = r.exitCode !== 3 || py.stdout !== "42\n" ? 1 : 0;
} finally {
  await sb.terminate();
}
