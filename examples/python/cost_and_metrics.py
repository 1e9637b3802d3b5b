"""Read what a sandbox costs so far and its resource samples, and the
team's usage.

    COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... python3 cost_and_metrics.py
"""

import sys

import cove

with cove.Client() as client, client.create(labels={"example": "cost-and-metrics"}) as sb:
    sb.run("python3 -c 'sum(i * i for i in range(2_000_000))'")

    usage = sb.usage()
    print(f"cost so far: ${usage.cost_usd:.6f} (cpu {usage.cpu_s:.2f} s, memory {usage.memory_gib_s:.3f} GiB·s)")

    metrics = sb.metrics()
    print("metric samples:", len(metrics.samples), "every", metrics.step_s, "s")

    team = client.usage(group_by="sandbox")
    print("team report:", sorted(team.raw))
    sys.exit(0 if usage.sandbox_id == sb.id and metrics.sandbox_id == sb.id else 1)
