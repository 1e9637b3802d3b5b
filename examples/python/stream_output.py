"""Stream a command's output as it comes, stop reading part way (as a
dropped connection or a restarted agent would), and resume from the last
sequence number seen: no line is lost or repeated. Within one
``output()`` the SDK resumes after a cut by itself; ``after=`` does the same
across processes.

    COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... python3 stream_output.py
"""

import sys

import cove

with cove.Client() as client, client.create(labels={"example": "stream-output"}) as sb:
    cmd = sb.start("for i in 1 2 3 4 5 6; do echo line $i; sleep 0.2; done")

    seen, last = [], 0
    for chunk in cmd.output():
        if chunk.type == "exit":
            break
        seen.append(chunk.data.decode())
        last = chunk.seq
        if "line 3" in "".join(seen):
            break  # stop here, as if the connection had dropped
    print("before the cut:", "".join(seen).split())

    # Later, perhaps in another process: the command by its IDs, read on
    # from the last seq.
    again = client.get(sb.id).command(cmd.id)
    exit_code = None
    for chunk in again.output(after=last):
        if chunk.type == "exit":
            exit_code = chunk.exit_code
            break
        seen.append(chunk.data.decode())
    lines = "".join(seen).split("\n")
    print("all:", [x for x in lines if x], "| exit", exit_code)
    sys.exit(0 if [x for x in lines if x] == [f"line {i}" for i in range(1, 7)] and exit_code == 0 else 1)
