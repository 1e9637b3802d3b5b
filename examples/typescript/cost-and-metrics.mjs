// What a sandbox costs and uses: its cost so far and price per hour, its
// resource samples, and the team's usage grouped by sandbox.
//
//     COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... node cost-and-metrics.mjs

import { Client } from "@cove-dev/sdk";

const client = new Client();
const sb = await client.create({ labels: { example: "cost-and-metrics" } });
try {
  await sb.run("python3 -c 'sum(i * i for i in range(3_000_000))'");

  const usage = await sb.usage();
  console.log(`cost so far: $${usage.costUsd.toFixed(6)}; running costs $${usage.pricePerHourUsd.running}/h`);

  const m = await sb.metrics({ step: "1" });
  console.log(`${m.samples.length} samples every ${m.stepS}s, ${m.gaps.length} gaps`);
  for (const s of m.samples.slice(-3)) {
    console.log(`${s.time}: ${s.cpuMillicores} millicores, ${(s.memoryBytes / 2 ** 20).toFixed(1)} MiB`);
  }

  const report = await client.usage({ groupBy: "sandbox" });
  console.log("team usage report:", Object.keys(report).join(", "));

  process.exitCode = typeof usage.costUsd !== "number" || !Array.isArray(m.samples) ? 1 : 0;
} finally {
  await sb.terminate();
}
