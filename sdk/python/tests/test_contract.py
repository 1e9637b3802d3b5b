"""The SDK against the API's OpenAPI document: every operation is offered
by a method that exists (sync and async), or listed as not offered with a
reason. A new operation, or a removed method, fails it."""

import json
import os

import cove

# operationId -> (class name, method) in the sync client; the async client
# has the same names on AsyncClient, AsyncSandbox, AsyncCommand, AsyncFiles.
OPERATIONS = {
    "getOpenAPI": ("Client", "openapi"),
    "createSandbox": ("Client", "create"),
    "listSandboxes": ("Client", "list_page"),
    "getSandbox": ("Client", "get"),
    "terminateSandbox": ("SandboxHandle", "terminate"),
    "updateSandbox": ("SandboxHandle", "update"),
    "sleepSandbox": ("SandboxHandle", "sleep"),
    "wakeSandbox": ("SandboxHandle", "wake"),
    "sandboxNetwork": ("SandboxHandle", "network"),
    "createCommand": ("SandboxHandle", "start"),
    "listCommands": ("SandboxHandle", "commands"),
    "getCommand": ("SandboxHandle", "command"),
    "commandOutput": ("Command", "output"),
    "commandStdout": ("Command", "stdout"),
    "commandStderr": ("Command", "stderr"),
    "commandStdin": ("Command", "write"),
    "commandSignal": ("Command", "signal"),
    "attachCommand": ("Command", "attach"),
    "listFiles": ("Files", "list"),
    "statFile": ("Files", "stat"),
    "readFile": ("Files", "read"),
    "writeFile": ("Files", "write"),
    "editFile": ("Files", "edit"),
    "makeDirectory": ("Files", "mkdir"),
    "moveFile": ("Files", "move"),
    "removeFile": ("Files", "remove"),
    "readArchive": ("Files", "download_dir"),
    "watchFiles": ("Files", "watch"),
    "writeArchive": ("Files", "upload_dir"),
    "listEvents": ("Client", "events"),
    "streamEvents": ("Client", "stream_events"),
    "createTeam": ("Client", "create_team"),
    "listTeams": ("Client", "list_teams"),
    "createKey": ("Client", "create_key"),
    "revokeKey": ("Client", "revoke_key"),
    "createTicket": ("Client", "create_ticket"),
    "putSecret": ("Client", "put_secret"),
    "getSecret": ("Client", "get_secret"),
    "listSecrets": ("Client", "list_secrets"),
    "deleteSecret": ("Client", "delete_secret"),
    "sandboxMetrics": ("SandboxHandle", "metrics"),
    "sandboxUsage": ("SandboxHandle", "usage"),
    "usage": ("Client", "usage"),
    "updateTeam": ("Client", "update_team"),
    "createWebhook": ("Client", "create_webhook"),
    "listWebhooks": ("Client", "list_webhooks"),
    "getWebhook": ("Client", "get_webhook"),
    "deleteWebhook": ("Client", "delete_webhook"),
    "listDeliveries": ("Client", "webhook_deliveries"),
    "createPreview": ("SandboxHandle", "preview"),
    "listPreviews": ("SandboxHandle", "previews"),
    "deletePreview": ("SandboxHandle", "delete_preview"),
    "listTemplates": ("Client", "templates"),
    "teamMe": ("Client", "team_me"),
    "createAsset": ("Client", "create_asset"),
    "listAssets": ("Client", "list_assets_page"),
    "getAsset": ("Client", "get_asset"),
    "assetContent": ("Client", "read_asset"),
    "deleteAsset": ("Client", "delete_asset"),
    "createSnapshot": ("SandboxHandle", "snapshot"),
    "listSnapshots": ("Client", "list_snapshots"),
    "getSnapshot": ("Client", "get_snapshot"),
    "deleteSnapshot": ("Client", "delete_snapshot"),
    "createVolume": ("Client", "create_volume"),
    "listVolumes": ("Client", "list_volumes_page"),
    "getVolume": ("Client", "get_volume"),
    "deleteVolume": ("Client", "delete_volume"),
    "restoreSandbox": ("SandboxHandle", "restore"),
    "forkSandbox": ("SandboxHandle", "fork"),
    "saveAsset": ("SandboxHandle", "save_asset"),
    "submitWorkload": ("Client", "submit_workload"),
    "listWorkloads": ("Client", "list_workloads_page"),
    "getWorkload": ("Client", "get_workload"),
    "cancelWorkload": ("Client", "cancel_workload"),
    "workloadOutput": ("Client", "workload_output"),
    "workloadStdout": ("Client", "workload_stdout"),
    "workloadStderr": ("Client", "workload_stderr"),
    "importImage": ("Client", "import_image"),
    "listImages": ("Client", "images"),
    "getImage": ("Client", "get_image"),
    "updateImage": ("Client", "update_image"),
    "deleteImage": ("Client", "delete_image"),
}

# operationId -> why the SDK leaves it out.
NOT_OFFERED = {
    "metrics": "Prometheus text for operators' scrapers, not for a team's program",
    **{
        op: "a fleet's nodes are the operators' (admin key): `cove nodes` and the Go SDK serve them, not a team's program"
        for op in ("listNodes", "drainNode", "undrainNode", "removeNode", "rotateJoinToken")
    },
    **{
        op: "a preview's traffic is the app's own HTTP: any HTTP client, with the url and token preview() answers"
        for op in ("previewGet", "previewPost", "previewPut", "previewPatch", "previewDelete")
    },
}

ASYNC = {"Client": "AsyncClient", "SandboxHandle": "AsyncSandbox", "Command": "AsyncCommand", "Files": "AsyncFiles"}


def operations():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "..", "api", "openapi.json")) as f:
        doc = json.load(f)
    for path, item in doc["paths"].items():
        for verb, op in item.items():
            if verb in ("get", "put", "post", "patch", "delete"):
                yield verb.upper() + " " + path, op["operationId"]


def test_every_operation_is_offered():
    missing, seen = [], set()
    for where, op in operations():
        seen.add(op)
        if op in NOT_OFFERED:
            continue
        if op not in OPERATIONS:
            missing.append(f"{op} ({where}) has no SDK method: add one and map it in OPERATIONS, or list it in NOT_OFFERED")
            continue
        cls, meth = OPERATIONS[op]
        for c in (cls, ASYNC[cls]):
            if not callable(getattr(getattr(cove, c), meth, None)):
                missing.append(f"{op} maps to {c}.{meth}, which does not exist")
    stale = sorted(set(OPERATIONS) - seen)
    assert not missing, "\n".join(missing)
    assert not stale, f"OPERATIONS maps operations the API does not have: {stale}"
