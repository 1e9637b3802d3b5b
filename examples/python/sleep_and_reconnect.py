"""Put a named sandbox to sleep, then find it again by name (as another
process would, hours later), wake it and carry on where it was.

    COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... python3 sleep_and_reconnect.py
"""

import sys
import uuid

import cove

name = "example-" + uuid.uuid4().hex[:8]
with cove.Client() as client:
    sb = client.create(name=name, labels={"example": "sleep-and-reconnect"}, keep=True)
    sb.files.write(sb.info.workdir + "/notes.txt", "state to keep\n")
    sb.sleep()
    print(name, "is", sb.info.state)

# Later: a new client, the sandbox by its name.
with cove.Client() as client, client.get(name) as sb:
    sb.wake()
    print(name, "is", sb.info.state)
    text = sb.files.read_text(sb.info.workdir + "/notes.txt")
    print("notes:", text.strip())
    sys.exit(0 if text == "state to keep\n" else 1)
