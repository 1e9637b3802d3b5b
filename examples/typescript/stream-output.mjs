// Stream a command's output as it comes, stop in the middle (as a dropped
// connection or a restarted program would), and resume from the last
// record seen: nothing is lost or repeated.
//
//     COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... node stream-output.mjs

import { Client } from "@cove-dev/sdk";

const client = new Client();
const sb = await client.create({ labels: { example: "stream-output" } });
try {
  const cmd = await sb.start("for i in 1 2 3 4 5 6; do echo line $i; sleep 0.3; done");
  const dec = new TextDecoder();
  let text = "";
  let lastSeq = 0;

  // The first records, then the loop is left: the server keeps the output.
  for await (const ch of cmd.output()) {
    text += dec.decode(ch.data);
    lastSeq = ch.seq;
    if (text.includes("line 2")) break;
  }
  console.log(`stopped after seq ${lastSeq}`);

  // Resume where we stopped, to the exit.
  let exitCode = null;
  for await (const ch of cmd.output({ after: lastSeq })) {
    if (ch.type === "exit") exitCode = ch.exitCode;
    else text += dec.decode(ch.data);
  }
  process.stdout.write(text);
  console.log("exit code:", exitCode);

  const want = [1, 2, 3, 4, 5, 6].map((i) => `line ${i}\n`).join("");
  process.exitCode = text !== want || exitCode !== 0 ? 1 : 0;
} finally {
  await sb.terminate();
}
