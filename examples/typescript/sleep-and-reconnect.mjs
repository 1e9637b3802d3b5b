// Put a sandbox to sleep (its files are kept, its compute released), find
// it again by name from a new client, as a later run of a program would,
// and wake it where it was.
//
//     COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... node sleep-and-reconnect.mjs

import { randomBytes } from "node:crypto";

import { Client } from "@cove-dev/sdk";

const name = "sleepy-" + randomBytes(4).toString("hex");
const first = new Client();
const sb = await first.create({ name, labels: { example: "sleep-and-reconnect" } });
let ok = false;
try {
  await sb.files.write(sb.info.workdir + "/notes.txt", "kept across sleep\n");
  const asleep = await sb.sleep();
  console.log(`${name} is ${asleep.state}`);

  // Later, elsewhere: only the name is known.
  const later = new Client();
  const again = await later.get(name);
  console.log(`found ${again.id} by name, ${again.info.state}`);
  await again.wake();
  const text = await again.files.readText(again.info.workdir + "/notes.txt");
  console.log(`woke it: ${again.info.state}; notes.txt: ${text.trim()}`);
  ok = asleep.state === "asleep" && again.id === sb.id && text === "kept across sleep\n";
} finally {
  await sb.terminate();
}
process.exit(ok ? 0 : 1);
