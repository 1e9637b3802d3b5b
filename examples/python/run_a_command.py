"""Run a command in a sandbox and read its output and exit code.

    COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... python3 run_a_command.py
"""

import sys

import cove

with cove.Client() as client, client.create(labels={"example": "run-a-command"}) as sb:
    ok = sb.run("echo hello from $(hostname)")
    print(ok.stdout.strip(), "| exit", ok.exit_code)

    failed = sb.run(argv=["sh", "-c", "echo oops >&2; exit 3"])
    print(failed.stderr.strip(), "| exit", failed.exit_code)

    sys.exit(0 if ok.exit_code == 0 and failed.exit_code == 3 else 1)
