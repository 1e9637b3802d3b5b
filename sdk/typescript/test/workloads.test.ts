// Workloads and imported images against a real cove server (COVE_URL,
// COVE_API_KEY); skipped without one.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { arch, tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";

import * as cove from "@cove-dev/sdk";
import { packDir } from "@cove-dev/sdk";

import { KEY, URL_, name, skip } from "./helpers.js";

const dec = new TextDecoder();

function client(): cove.Client {
  return new cove.Client({ url: URL_, apiKey: KEY });
}

function sha256(b: Uint8Array): string {
  return createHash("sha256").update(b).digest("hex");
}

/** An OCI image layout archive (uncompressed tar) of one gzip layer: the
 * host's static /bin/busybox, /bin/sh and a few applets linked to it,
 * /etc/passwd and /etc/group. The layer is packed with the SDK's own
 * folder packer; the layout's files go in a tar it writes as well. */
async function busyboxOCI(dir: string): Promise<string> {
  const root = join(dir, "rootfs");
  await mkdir(join(root, "bin"), { recursive: true });
  await mkdir(join(root, "etc"), { recursive: true });
  await mkdir(join(root, "tmp"), { recursive: true });
  await copyFile("/bin/busybox", join(root, "bin", "busybox"));
  for (const a of ["sh", "echo", "cat", "ls", "id", "true"]) await symlink("busybox", join(root, "bin", a));
  await writeFile(join(root, "etc", "passwd"), "root:x:0:0:root:/root:/bin/sh\n");
  await writeFile(join(root, "etc", "group"), "root:x:0:\n");
  const layer = await packDir(root);
  const platform = arch() === "x64" ? "amd64" : arch();
  const config = new TextEncoder().encode(JSON.stringify({
    architecture: platform, os: "linux", config: { Env: ["PATH=/bin"], Cmd: ["/bin/sh"] },
    rootfs: { type: "layers", diff_ids: ["sha256:" + sha256(gunzipSync(layer))] },
  }));
  const desc = (mediaType: string, b: Uint8Array) => ({ mediaType, digest: "sha256:" + sha256(b), size: b.length });
  const manifest = new TextEncoder().encode(JSON.stringify({
    schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: desc("application/vnd.oci.image.config.v1+json", config),
    layers: [desc("application/vnd.oci.image.layer.v1.tar+gzip", layer)],
  }));
  const index = JSON.stringify({
    schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [desc("application/vnd.oci.image.manifest.v1+json", manifest)],
  });
  const layout = join(dir, "layout");
  await mkdir(join(layout, "blobs", "sha256"), { recursive: true });
  await writeFile(join(layout, "oci-layout"), '{"imageLayoutVersion":"1.0.0"}');
  await writeFile(join(layout, "index.json"), index);
  for (const b of [config, manifest, layer]) await writeFile(join(layout, "blobs", "sha256", sha256(b)), b);
  const archive = join(dir, "busybox.tar");
  await writeFile(archive, gunzipSync(await packDir(layout)));
  return archive;
}

test("a workload runs; its output follows and replays", { skip }, async () => {
  const c = client();
  const w = await c.submitWorkload({ command: "echo hi; echo err >&2; exit 3", labels: { sdk: "typescript" } });
  assert.ok(w.id!.startsWith("wl_"));
  let out = "";
  let err = "";
  const exits: Array<number | null> = [];
  for await (const ch of c.workloadOutput(w.id!)) {
    if (ch.type === "exit") exits.push(ch.exitCode);
    else if (ch.stream === "stdout") out += dec.decode(ch.data);
    else if (ch.stream === "stderr") err += dec.decode(ch.data);
  }
  assert.deepEqual([out, err, exits], ["hi\n", "err\n", [3]]);
  const done = await c.waitWorkload(w.id!);
  assert.deepEqual([done.state, done.exitCode, cove.workloadDone(done)], ["exited", 3, true]);
  const replay = [];
  for await (const ch of c.workloadOutput(w.id!, { follow: false })) replay.push(ch);
  assert.equal(replay.at(-1)?.type, "exit");
  assert.equal(replay.at(-1)?.exitCode, 3);
  const later = [];
  for await (const ch of c.workloadOutput(w.id!, { after: replay[0].seq, follow: false })) later.push(ch.seq);
  assert.deepEqual(later, replay.slice(1).map((ch) => ch.seq));
  assert.equal(dec.decode(await c.workloadStdout(w.id!)), "hi\n");
  assert.equal(dec.decode(await c.workloadStderr(w.id!)), "err\n");
  assert.equal((await c.getWorkload(w.id!)).exitCode, 3);
  let found = false;
  for await (const x of c.listWorkloads({ state: "exited" })) if (x.id === w.id!) found = true;
  assert.ok(found, "listWorkloads did not show the workload");
  for (const x of (await c.listWorkloadsPage({ state: "exited", limit: 5 })).items) assert.equal(x.state, "exited");
});

test("a GPU workload queues and is cancelled", { skip }, async () => {
  const c = client();
  let w = await c.submitWorkload({ argv: ["true"], resources: { gpus: 1 }, labels: { sdk: "typescript" } });
  assert.deepEqual([w.state, w.resources?.gpus], ["queued", 1]);
  // No node here has a GPU: it waits in the queue, and says why.
  w = await c.getWorkload(w.id!);
  assert.equal(w.state, "queued");
  assert.ok(w.stateReason);
  const drain = async (it: AsyncGenerator<cove.Chunk>) => { for await (const _ of it) { /* drop */ } };
  await assert.rejects(drain(c.workloadOutput(w.id!, { follow: false })), cove.Conflict);
  let found = false;
  for await (const x of c.listWorkloads({ state: "queued" })) if (x.id === w.id!) found = true;
  assert.ok(found);
  const cancelled = await c.cancelWorkload(w.id!);
  assert.equal(cancelled.state, "cancelled");
  assert.equal((await c.getWorkload(w.id!, { wait: "exited", timeoutS: 5 })).state, "cancelled");
  // Following a workload that never ran ends with Conflict, not a hang.
  await assert.rejects(drain(c.workloadOutput(w.id!)), cove.Conflict);
  await assert.rejects(c.getWorkload("wl_doesnotexist"), cove.NotFound);
  await assert.rejects(c.submitWorkload({ command: "true", argv: ["true"] }), cove.InvalidArgument);
});

test("an image is imported, listed, updated, used and deleted", { skip: skip || (!existsSync("/bin/busybox") && "no static /bin/busybox") }, async () => {
  const c = client();
  const dir = await mkdtemp(join(tmpdir(), "cove-ts-img-"));
  try {
    const archive = await busyboxOCI(dir);
    const imgName = name("ts-img");
    const img = await c.importImageFromFile(archive, { name: imgName, settings: { examples: ["echo hello"] } });
    try {
      assert.ok(img.id!.startsWith("img_"));
      assert.equal(img.name, imgName);
      assert.ok(img.digest!.startsWith("sha256:"));
      assert.deepEqual(img.examples, ["echo hello"]);
      assert.equal((await c.getImage(imgName)).id, img.id!);
      assert.equal((await c.getImage(img.id!)).name, imgName);
      assert.ok((await c.images()).some((i) => i.id === img.id!));
      const upd = await c.updateImage(img.id!, { examples: ["echo changed"] });
      assert.deepEqual([upd.examples, upd.digest], [["echo changed"], img.digest]);
      // The same bytes from memory, under a name already taken.
      const { readFile } = await import("node:fs/promises");
      await assert.rejects(c.importImage(new Uint8Array(await readFile(archive)), { name: imgName }), cove.Conflict);
      // A workload runs in it, by the image's name.
      const w = await c.submitWorkload({ command: "echo from-image", image: imgName });
      assert.equal((await c.waitWorkload(w.id!)).exitCode, 0);
      assert.equal(dec.decode(await c.workloadStdout(w.id!)), "from-image\n");
    } finally {
      await c.deleteImage(img.id!);
    }
    await assert.rejects(c.getImage(img.id!), cove.NotFound);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
