"""Upload a local folder (its .coveignore honoured, as git honours a
.gitignore) and run its tests in a sandbox.

    COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... python3 upload_and_test.py
"""

import os
import sys
import tempfile

import cove

scratch = tempfile.TemporaryDirectory()  # removed when the program exits
project = scratch.name
files = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "test_calc.py": "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
                    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    ".coveignore": "/build\n*.log\n",
    "build/big.bin": "not sent\n",
    "debug.log": "not sent\n",
}
for rel, text in files.items():
    os.makedirs(os.path.dirname(os.path.join(project, rel)), exist_ok=True)
    with open(os.path.join(project, rel), "w") as f:
        f.write(text)

with cove.Client() as client, client.create(labels={"example": "upload-and-test"}) as sb:
    work = sb.info.workdir + "/project"
    sb.files.upload_dir(project, work)
    sent = sorted(e.name for e in sb.files.list(work))
    print("uploaded:", sent)

    result = sb.run("python3 -B -m unittest -v", cwd=work)
    print(result.stderr, end="")
    sys.exit(0 if result.exit_code == 0 and sent == [".coveignore", "calc.py", "test_calc.py"] else 1)
