"""Create a sandbox whose network reaches only the destinations on its allow
list, then read its policy and what it tried to reach: a destination off
the list shows as denied.

    COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... python3 network_allow_list.py
"""

import sys
import time

import cove

allow = ["example.com"]
with cove.Client() as client, client.create(network={"allow": allow}, labels={"example": "allow-list"}) as sb:
    # A destination off the list (by address, so that the example needs no
    # DNS): the connection goes nowhere.
    sb.run("python3 -c \"import socket; socket.create_connection(('192.0.2.1', 443), timeout=3).recv(1)\"")

    # The observation is recorded as the sandbox's gateway sees it, so it
    # may take a moment to show.
    deadline = time.monotonic() + 15
    while True:
        view = sb.network()
        denied = [o for o in view.observations if o.destination == "192.0.2.1" and o.decision == "denied"]
        if denied or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    print("allowed:", view.policy.allow if view.policy else [])
    for o in view.observations:
        print("seen:", o.destination, o.port, o.decision)
    sys.exit(0 if view.policy and view.policy.allow == allow and denied else 1)
