"""An agent trying fixes side by side: store a project once as an asset,
start one sandbox per candidate fix from it (asyncio, all at once), run the
tests in each, keep what passed.

    COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... python3 try_fixes_from_asset.py
"""

import asyncio
import os
import sys
import tempfile

import cove

CANDIDATES = ["a + b", "a * b"]

scratch = tempfile.TemporaryDirectory()  # removed when the program exits
project = scratch.name
with open(os.path.join(project, "calc.py"), "w") as f:
    f.write("def add(a, b):\n    return a - b\n")
with open(os.path.join(project, "test_calc.py"), "w") as f:
    f.write("import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
            "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")


async def attempt(client: cove.AsyncClient, asset: cove.Asset, fix: str) -> bool:
    # The asset lands in the workdir before the sandbox runs.
    async with await client.create(source=asset.source(), labels={"example": "try-fixes"}) as sb:
        path = sb.info.workdir + "/calc.py"
        await sb.files.edit(path, [{"old": "a - b", "new": fix}])
        r = await sb.run("python3 -B -m unittest -q", cwd=sb.info.workdir)
        print(f"{fix!r}: exit {r.exit_code}")
        return r.exit_code == 0


async def main() -> int:
    async with cove.AsyncClient() as client:
        asset = await client.create_asset_from_dir(project, name="calc-project")
        print("asset", asset.id, asset.size, "bytes, sha-256", asset.sha256[:12])
        try:
            passed = await asyncio.gather(*(attempt(client, asset, fix) for fix in CANDIDATES))
        finally:
            await client.delete_asset(asset.id)
    print("fixes that pass:", [fix for fix, ok in zip(CANDIDATES, passed) if ok])
    return 0 if passed == [True, False] else 1


sys.exit(asyncio.run(main()))
