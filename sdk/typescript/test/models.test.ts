// The SDK's models against api/openapi.json, field by field. The wire
// models are src/openapi.ts, generated from the document by
// scripts/gen-models.mjs: regenerating from the document as it is now
// must give the committed file. The models the SDK decodes itself (Chunk,
// from an OutputRecord) must have the schema's fields after the one
// camelCase rule, checked by the compiler and at run time. None of it
// needs a server.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import * as cove from "@cove-dev/sdk";
import type { Camel, Chunk, Schemas } from "@cove-dev/sdk";

// dist/test/ -> the package
const root = process.env.COVE_SDK_SRC || resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

function openapi(): any {
  const file = process.env.COVE_OPENAPI || resolve(root, "..", "..", "api", "openapi.json");
  return JSON.parse(readFileSync(file, "utf8"));
}

/** The camelCase rule at run time, as Camel is at compile time. */
function camel(s: string): string {
  return s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

// Compile-time: Chunk has exactly OutputRecord's fields, renamed by the
// rule. Dropping or adding a field of Chunk (or of the schema) breaks
// the build.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const chunkFields: Same<keyof Chunk, Camel<keyof Schemas["OutputRecord"] & string>> = true;
const camelRule: [Same<Camel<"memory_mib">, "memoryMib">, Same<Camel<"cost_usd">, "costUsd">] = [true, true];

test("src/openapi.ts is what the document generates", async () => {
  const gen = await import(pathToFileURL(resolve(root, "scripts", "gen-models.mjs")).href);
  const want: string = await gen.generate(openapi());
  const have = readFileSync(resolve(root, "src", "openapi.ts"), "utf8");
  if (have === want) return;
  const a = have.split("\n");
  const b = want.split("\n");
  const diff: string[] = [];
  for (let i = 0; i < Math.max(a.length, b.length) && diff.length < 20; i++) {
    if (a[i] !== b[i]) diff.push(`line ${i + 1}: have ${JSON.stringify(a[i])}, the document gives ${JSON.stringify(b[i])}`);
  }
  assert.fail(`src/openapi.ts differs from api/openapi.json: run \`npm run gen\` in sdk/typescript\n${diff.join("\n")}`);
});

test("every model types.ts names is a schema of the document", () => {
  const schemas = openapi().components.schemas;
  const src = readFileSync(resolve(root, "src", "types.ts"), "utf8");
  const named = [...src.matchAll(/Schemas\["([A-Za-z0-9_]+)"\]/g)].map((m) => m[1]);
  assert.ok(named.length > 30, `types.ts names only ${named.length} schemas`);
  const missing = named.filter((n) => !(n in schemas));
  assert.deepEqual(missing, [], `types.ts names schemas the document lacks: ${missing}`);
});

test("a Chunk has the fields of an OutputRecord, renamed by the camelCase rule", async () => {
  assert.equal(chunkFields, true);
  assert.deepEqual(camelRule, [true, true]);
  const props = Object.keys(openapi().components.schemas.OutputRecord.properties);
  // One record with every field the schema has, decoded by the SDK.
  const record: Record<string, unknown> = {};
  for (const p of props) record[p] = p === "data" ? "aGk=" : p === "seq" ? 1 : p === "exit_code" ? 0 : p === "timed_out" ? false : "x";
  record.type = "exit";
  const fake = (async () => new Response(JSON.stringify(record) + "\n", {
    status: 200, headers: { "Content-Type": "application/x-ndjson" },
  })) as unknown as typeof fetch;
  const c = new cove.Client({ url: "http://127.0.0.1:9", apiKey: "k", fetch: fake });
  const chunks: Chunk[] = [];
  for await (const ch of c.workloadOutput("wl_x", { follow: false })) chunks.push(ch);
  assert.equal(chunks.length, 1);
  assert.deepEqual(Object.keys(chunks[0]).sort(), props.map(camel).sort());
});

test("the keys of maps are never renamed", async () => {
  const maps = { labels: { ticket_id: "42" }, env: { MY_VAR: "1" }, secrets: { GH_TOKEN: "gh_token" } };
  const fake = (async () => new Response(JSON.stringify({ id: "sbx_x", state: "running", ...maps }), {
    status: 200, headers: { "Content-Type": "application/json" },
  })) as unknown as typeof fetch;
  const c = new cove.Client({ url: "http://127.0.0.1:9", apiKey: "k", fetch: fake });
  const sb = await c.get("sbx_x");
  assert.deepEqual([sb.info.labels, sb.info.env, sb.info.secrets], [maps.labels, maps.env, maps.secrets]);
});
