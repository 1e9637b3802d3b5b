// A sandbox whose network lets out only what its allow list names: a
// connection elsewhere is refused, and the sandbox's network view shows
// the policy and what it tried to reach.
//
//     COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... node network-allow-list.mjs

import { Client } from "@cove-dev/sdk";

const client = new Client();
const sb = await client.create({
  labels: { example: "network-allow-list" },
  network: { allow: ["api.internal.example"] },
});
try {
  // 192.0.2.1 (TEST-NET-1) is on no allow list: the connection never
  // reaches it. The sandbox's traffic goes through cove's filter, which
  // answers for a refused destination itself.
  const probe = "import socket\n" +
    "try:\n" +
    "    s = socket.create_connection(('192.0.2.1', 80), timeout=3)\n" +
    "    s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n" +
    "    print('answer:', s.recv(200).decode(errors='replace').splitlines()[:1])\n" +
    "except OSError as e:\n" +
    "    print('refused:', e)\n";
  const r = await sb.run(undefined, { argv: ["python3", "-c", probe] });
  console.log("connection elsewhere:", r.stdout.trim());

  // The allow list can change while the sandbox runs.
  await sb.update({ network: { allow: ["api.internal.example", "docs.internal.example"] } });

  // What the sandbox tried to reach, with the filter's decision.
  let view = await sb.network();
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; view = await sb.network()) {
    if (view.observations.some((o) => o.destination.includes("192.0.2.1"))) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  console.log("allowed:", view.policy.allow.join(", "));
  for (const o of view.observations) {
    console.log(`${o.decision} ${o.destination}:${o.port} (${o.count}x, last by ${o.lastCommandId || "-"})`);
  }
  const denied = view.observations.some((o) => o.destination.includes("192.0.2.1") && o.decision === "denied");
  process.exitCode = !denied || view.policy.allow.length !== 2 ? 1 : 0;
} finally {
  await sb.terminate();
}
