// The SDK against the API's OpenAPI document: every operation is offered
// by a method that exists, or listed as not offered with a reason. A new
// operation, or a removed method, fails it.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import * as cove from "@cove-dev/sdk";

// operationId -> [class, method].
export const OPERATIONS: Record<string, [string, string]> = {
  getOpenAPI: ["Client", "openapi"],
  createSandbox: ["Client", "create"],
  listSandboxes: ["Client", "listPage"],
  getSandbox: ["Client", "get"],
  terminateSandbox: ["Sandbox", "terminate"],
  updateSandbox: ["Sandbox", "update"],
  sleepSandbox: ["Sandbox", "sleep"],
  wakeSandbox: ["Sandbox", "wake"],
  sandboxNetwork: ["Sandbox", "network"],
  sandboxMetrics: ["Sandbox", "metrics"],
  sandboxUsage: ["Sandbox", "usage"],
  usage: ["Client", "usage"],
  updateTeam: ["Client", "updateTeam"],
  createCommand: ["Sandbox", "start"],
  listCommands: ["Sandbox", "commands"],
  getCommand: ["Sandbox", "command"],
  commandOutput: ["Command", "output"],
  commandStdout: ["Command", "stdout"],
  commandStderr: ["Command", "stderr"],
  commandStdin: ["Command", "write"],
  commandSignal: ["Command", "signal"],
  attachCommand: ["Command", "attach"],
  listFiles: ["Files", "list"],
  statFile: ["Files", "stat"],
  readFile: ["Files", "read"],
  writeFile: ["Files", "write"],
  editFile: ["Files", "edit"],
  makeDirectory: ["Files", "mkdir"],
  moveFile: ["Files", "move"],
  removeFile: ["Files", "remove"],
  readArchive: ["Files", "downloadDir"],
  watchFiles: ["Files", "watch"],
  writeArchive: ["Files", "uploadDir"],
  listEvents: ["Client", "events"],
  streamEvents: ["Client", "streamEvents"],
  createTeam: ["Client", "createTeam"],
  listTeams: ["Client", "listTeams"],
  createKey: ["Client", "createKey"],
  revokeKey: ["Client", "revokeKey"],
  createTicket: ["Client", "createTicket"],
  putSecret: ["Client", "putSecret"],
  getSecret: ["Client", "getSecret"],
  listSecrets: ["Client", "listSecrets"],
  deleteSecret: ["Client", "deleteSecret"],
  createWebhook: ["Client", "createWebhook"],
  listWebhooks: ["Client", "listWebhooks"],
  getWebhook: ["Client", "getWebhook"],
  deleteWebhook: ["Client", "deleteWebhook"],
  listDeliveries: ["Client", "webhookDeliveries"],
  createAsset: ["Client", "createAsset"],
  listAssets: ["Client", "listAssetsPage"],
  getAsset: ["Client", "getAsset"],
  assetContent: ["Client", "readAsset"],
  deleteAsset: ["Client", "deleteAsset"],
  createSnapshot: ["Sandbox", "snapshot"],
  listSnapshots: ["Client", "listSnapshots"],
  getSnapshot: ["Client", "getSnapshot"],
  deleteSnapshot: ["Client", "deleteSnapshot"],
  createVolume: ["Client", "createVolume"],
  listVolumes: ["Client", "listVolumesPage"],
  getVolume: ["Client", "getVolume"],
  deleteVolume: ["Client", "deleteVolume"],
  restoreSandbox: ["Sandbox", "restore"],
  forkSandbox: ["Sandbox", "fork"],
  saveAsset: ["Sandbox", "saveAsset"],
  createPreview: ["Sandbox", "preview"],
  listPreviews: ["Sandbox", "previews"],
  deletePreview: ["Sandbox", "deletePreview"],
  listTemplates: ["Client", "templates"],
  teamMe: ["Client", "teamMe"],
  submitWorkload: ["Client", "submitWorkload"],
  listWorkloads: ["Client", "listWorkloadsPage"],
  getWorkload: ["Client", "getWorkload"],
  cancelWorkload: ["Client", "cancelWorkload"],
  workloadOutput: ["Client", "workloadOutput"],
  workloadStdout: ["Client", "workloadStdout"],
  workloadStderr: ["Client", "workloadStderr"],
  importImage: ["Client", "importImage"],
  listImages: ["Client", "images"],
  getImage: ["Client", "getImage"],
  updateImage: ["Client", "updateImage"],
  deleteImage: ["Client", "deleteImage"],
};

// operationId -> why the SDK leaves it out.
export const NOT_OFFERED: Record<string, string> = {
  metrics: "Prometheus text for operators' scrapers, not for a team's program",
  previewGet: "a preview's traffic is the app's own HTTP: fetch its url with its token",
  previewPost: "a preview's traffic is the app's own HTTP",
  previewPut: "a preview's traffic is the app's own HTTP",
  previewPatch: "a preview's traffic is the app's own HTTP",
  previewDelete: "a preview's traffic is the app's own HTTP",
  listNodes: "a fleet's nodes are the operators' (admin key): `cove nodes` and the Go SDK serve them",
  drainNode: "a fleet's nodes are the operators' (admin key): `cove nodes` and the Go SDK serve them",
  undrainNode: "a fleet's nodes are the operators' (admin key): `cove nodes` and the Go SDK serve them",
  removeNode: "a fleet's nodes are the operators' (admin key): `cove nodes` and the Go SDK serve them",
  rotateJoinToken: "a fleet's nodes are the operators' (admin key): `cove nodes` and the Go SDK serve them",
};

const CLASSES: Record<string, { prototype: any }> = {
  Client: cove.Client, Sandbox: cove.Sandbox, Command: cove.Command, Files: cove.Files,
};

function operations(): Array<[string, string]> {
  // dist/test/ -> the package -> the repository's api/
  const here = dirname(fileURLToPath(import.meta.url));
  const file = process.env.COVE_OPENAPI || resolve(here, "..", "..", "..", "..", "api", "openapi.json");
  const doc = JSON.parse(readFileSync(file, "utf8"));
  const out: Array<[string, string]> = [];
  for (const [path, item] of Object.entries<any>(doc.paths)) {
    for (const [verb, op] of Object.entries<any>(item)) {
      if (["get", "put", "post", "patch", "delete"].includes(verb)) out.push([verb.toUpperCase() + " " + path, op.operationId]);
    }
  }
  return out;
}

test("every operation is offered", () => {
  const missing: string[] = [];
  const seen = new Set<string>();
  const ops = operations();
  assert.ok(ops.length > 0, "the OpenAPI document lists no operation");
  for (const [where, op] of ops) {
    seen.add(op);
    if (op in NOT_OFFERED) continue;
    const m = OPERATIONS[op];
    if (!m) {
      missing.push(`${op} (${where}) has no SDK method: add one and map it in OPERATIONS, or list it in NOT_OFFERED`);
      continue;
    }
    const [cls, meth] = m;
    if (typeof CLASSES[cls]?.prototype?.[meth] !== "function") missing.push(`${op} maps to ${cls}.${meth}, which does not exist`);
  }
  const stale = Object.keys(OPERATIONS).filter((op) => !seen.has(op)).sort();
  assert.deepEqual(missing, [], missing.join("\n"));
  assert.deepEqual(stale, [], `OPERATIONS maps operations the API does not have: ${stale}`);
});

test("every API error code has its class", () => {
  const codes = ["invalid_argument", "unauthenticated", "permission_denied", "not_found", "conflict",
    "precondition_failed", "payload_too_large", "unprocessable", "resource_exhausted", "budget_exceeded",
    "internal", "unavailable", "insufficient_storage"];
  for (const code of codes) {
    const e = cove.errorFrom(418, JSON.stringify({ error: { code, message: "m", details: { k: 1 } } }));
    assert.ok(e instanceof cove.CoveError && e instanceof Error);
    assert.notEqual(e.constructor, cove.CoveError, code);
    assert.equal(e.code, code);
    assert.equal(e.message, "m");
    assert.deepEqual(e.details, { k: 1 });
    assert.equal(e.status, 418);
  }
  const e = cove.errorFrom(404, "no json");
  assert.ok(e instanceof cove.NotFound);
});
