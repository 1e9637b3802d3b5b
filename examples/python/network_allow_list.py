"""Create a sandbox whose network reaches only the destinations on its allow
list, and read the policy and what the sandbox tried to reach.

    COVE_URL=http://127.0.0.1:7070 COVE_API_KEY=... python3 network_allow_list.py
"""

import sys

import cove

allow = ["example.com"]
with cove.Client() as client, client.create(network={"allow": allow}, labels={"example": "allow-list"}) as sb:
    # A destination off the list is refused (here by address, so that the
    # example needs no DNS).
    probe = sb.run("python3 -c \"import socket; socket.create_connection(('192.0.2.1', 443), timeout=3)\"")
    print("connecting off the list: exit", probe.exit_code)

    view = sb.network()
    print("allowed:", view.policy.allow if view.policy else [])
    for o in view.observations:
        print("seen:", o.raw)
    sys.exit(0 if view.policy and view.policy.allow == allow and probe.exit_code != 0 else 1)
