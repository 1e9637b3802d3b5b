// A sandbox whose network lets out only what its allow list names: a
// connection elsewhere is refused, and the sandbox's network view shows
// the policy and what it tried to reach.
//
//     COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... node network-allow-list.mjs

import { Client } from "@cove-dev/sdk";

const client = new Client();
await using sb = await client.create({
  labels: { example: "network-allow-list" },
  network: { allow: ["api.internal.example"] },
});

// 192.0.2.1 (TEST-NET-1) is on no allow list.
const r = await sb.run(undefined, {
  argv: ["python3", "-c", "import socket; socket.create_connection(('192.0.2.1', 80), timeout=3); print('connected')"],
});
console.log("connection elsewhere: exit", r.exitCode, r.stdout.includes("connected") ? "(connected!)" : "(refused)");

// The allow list can change while the sandbox runs.
await sb.update({ network: { allow: ["api.internal.example", "docs.internal.example"] } });
const view = await sb.network();
console.log("allowed:", view.policy.allow.join(", "));
for (const o of view.observations) {
  console.log(`${o.decision} ${o.destination}:${o.port} (${o.count}x, last by ${o.lastCommandId || "-"})`);
}

if (r.exitCode === 0 || view.policy.allow.length !== 2) process.exit(1);
