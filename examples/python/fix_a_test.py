"""An agent's loop: send a project to a sandbox, run its tests, read the
failing file, fix it, run the tests again.

    COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... python3 fix_a_test.py
"""

import os
import sys
import tempfile

import cove

scratch = tempfile.TemporaryDirectory()  # removed when the program exits
project = scratch.name
with open(os.path.join(project, "calc.py"), "w") as f:
    f.write("def add(a, b):\n    return a - b\n")
with open(os.path.join(project, "test_calc.py"), "w") as f:
    f.write("import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
            "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")

with cove.Client() as client, client.create(labels={"example": "fix-a-test"}) as sb:
    work = sb.info.workdir + "/project"
    sb.files.upload_dir(project, work)

    # -B: no bytecode cache, whose mtime check (seconds) could miss an edit
    # of the same size made within the same second.
    first = sb.run("python3 -B -m unittest -q", cwd=work)
    print("tests before the fix: exit", first.exit_code)

    source = sb.files.read(work + "/calc.py")
    print(source.text, end="")
    sb.files.edit(work + "/calc.py", [{"old": "a - b", "new": "a + b"}], if_version=source.version)

    second = sb.run("python3 -B -m unittest -q", cwd=work)
    print("tests after the fix: exit", second.exit_code)
    sys.exit(0 if first.exit_code != 0 and second.exit_code == 0 else 1)
