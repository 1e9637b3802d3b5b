// Local files for asset uploads and downloads, on Node only (imported when
// first used, so browsers never load node:fs).

import { DigestMismatch } from "./errors.js";

/** The sha-256 (hex) of a local file, read as a stream. */
export async function hashFile(path: string): Promise<string> {
  const [{ createReadStream }, { createHash }] = await Promise.all([import("node:fs"), import("node:crypto")]);
  const h = createHash("sha256");
  for await (const b of createReadStream(path)) h.update(b as Buffer);
  return h.digest("hex");
}

/** A local file as a web stream, to send as a request body. */
export async function fileStream(path: string): Promise<ReadableStream<Uint8Array>> {
  const [{ createReadStream }, { Readable }] = await Promise.all([import("node:fs"), import("node:stream")]);
  return Readable.toWeb(createReadStream(path)) as unknown as ReadableStream<Uint8Array>;
}

/** Write a response body into the file local as it comes, hashing it;
 * when the sha-256 is not want (or cannot be checked) the file is removed
 * and DigestMismatch thrown. */
export async function saveChecked(what: string, body: ReadableStream<Uint8Array>, want: Uint8Array | null, local: string): Promise<void> {
  const [fs, { createHash }] = await Promise.all([import("node:fs/promises"), import("node:crypto")]);
  if (!want) {
    await body.cancel().catch(() => {});
    throw new DigestMismatch(`download of ${what} has no sha-256 Repr-Digest; refusing unchecked bytes`);
  }
  const h = createHash("sha256");
  const fh = await fs.open(local, "w");
  let ok = false;
  try {
    const reader = body.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      h.update(value);
      await fh.write(value);
    }
    const got = new Uint8Array(h.digest());
    if (got.length !== want.length || got.some((x, i) => x !== want[i])) {
      throw new DigestMismatch(`download of ${what}: the bytes' sha-256 is not the one the server announced`);
    }
    ok = true;
  } finally {
    await fh.close();
    if (!ok) await fs.rm(local, { force: true });
  }
}
