// A small tar.gz writer and reader for folders, on Node only (node:fs and
// node:zlib are imported when first used, so browsers never load them).
// Modes, symlinks inside the folder and empty directories are kept; long
// names use PAX headers; entries that would leave the folder are refused.

import { InvalidArgument } from "./errors.js";

const enc = new TextEncoder();
const dec = new TextDecoder();

async function node() {
  const [fs, path, zlib] = await Promise.all([import("node:fs/promises"), import("node:path"), import("node:zlib")]);
  return { fs, path, zlib };
}

function octal(buf: Uint8Array, off: number, len: number, n: number): void {
  const s = n.toString(8).padStart(len - 1, "0");
  buf.set(enc.encode(s.slice(-(len - 1))), off);
  buf[off + len - 1] = 0;
}

function str(buf: Uint8Array, off: number, len: number, s: string): void {
  const b = enc.encode(s);
  buf.set(b.subarray(0, len), off);
}

function header(name: string, type: string, mode: number, size: number, mtime: number, linkname = ""): Uint8Array {
  const h = new Uint8Array(512);
  str(h, 0, 100, name);
  octal(h, 100, 8, mode & 0o7777);
  octal(h, 108, 8, 0);
  octal(h, 116, 8, 0);
  octal(h, 124, 12, size);
  octal(h, 136, 12, Math.max(0, Math.floor(mtime)));
  h.fill(0x20, 148, 156);
  str(h, 156, 1, type);
  str(h, 157, 100, linkname);
  str(h, 257, 6, "ustar");
  h[262] = 0;
  str(h, 263, 2, "00");
  let sum = 0;
  for (const b of h) sum += b;
  const cs = sum.toString(8).padStart(6, "0");
  str(h, 148, 6, cs);
  h[154] = 0;
  h[155] = 0x20;
  return h;
}

function pad(n: number): Uint8Array {
  const r = n % 512;
  return new Uint8Array(r === 0 ? 0 : 512 - r);
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = enc.encode(body).length;
  let total = len + String(len).length;
  if (String(total).length !== String(len).length) total = len + String(total).length;
  return `${total}${body}`;
}

/** One entry: its header(s), and for files its bytes padded. */
function entry(out: Uint8Array[], name: string, type: string, mode: number, mtime: number, data?: Uint8Array, linkname = "", dataSize = 0): void {
  const pax: string[] = [];
  if (enc.encode(name).length > 100) pax.push(paxRecord("path", name));
  if (enc.encode(linkname).length > 100) pax.push(paxRecord("linkpath", linkname));
  if (pax.length) {
    const body = enc.encode(pax.join(""));
    out.push(header("PaxHeaders/" + name.slice(-80), "x", 0o644, body.length, mtime), body, pad(body.length));
  }
  const size = data ? data.length : dataSize;
  out.push(header(name, type, mode, size, mtime, linkname));
  if (data) out.push(data, pad(size));
}

function ignored(rel: string, patterns: string[]): boolean {
  const parts = rel.split("/");
  for (let p of patterns) {
    p = p.trim().replace(/\/+$/, "");
    if (!p || p.startsWith("#")) continue;
    const re = glob(p);
    if (re.test(rel) || parts.some((x) => re.test(x))) return true;
  }
  return false;
}

function glob(p: string): RegExp {
  let s = "";
  for (const c of p) {
    if (c === "*") s += ".*";
    else if (c === "?") s += ".";
    else s += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp("^" + s + "$");
}

/** A local folder as tar.gz bytes. exclude patterns (and a .coveignore
 * file) are honoured; a symlink that leaves the folder is refused. */
export async function packDir(local: string, exclude: string[] = []): Promise<Uint8Array> {
  const { zlib } = await node();
  const out: Uint8Array[] = [];
  for await (const piece of tarPieces(local, exclude)) out.push(piece);
  return new Uint8Array(zlib.gzipSync(Buffer.concat(out)));
}

/** A local folder packed as packDir does, streamed into the file dest
 * (never whole in memory); answers the sha-256 (hex) of what was written. */
export async function packDirToFile(local: string, dest: string, exclude: string[] = []): Promise<string> {
  const { zlib } = await node();
  const [{ Readable, Transform }, { pipeline }, { createHash }] = await Promise.all([
    import("node:stream"), import("node:stream/promises"), import("node:crypto"),
  ]);
  const fsSync = await import("node:fs");
  const h = createHash("sha256");
  const hashing = new Transform({
    transform(chunk, _enc, done) {
      h.update(chunk);
      done(null, chunk);
    },
  });
  await pipeline(Readable.from(tarPieces(local, exclude)), zlib.createGzip(), hashing, fsSync.createWriteStream(dest, { mode: 0o600 }));
  return h.digest("hex");
}

const PIECE = 1 << 20;

/** The tar stream of a folder, piece by piece: headers, then each file's
 * bytes read in pieces and padded, then the two zero blocks of the end. */
async function* tarPieces(local: string, exclude: string[]): AsyncGenerator<Uint8Array> {
  const { fs, path } = await node();
  const root = path.resolve(local);
  const st = await fs.stat(root).catch(() => null);
  if (!st || !st.isDirectory()) throw new InvalidArgument(`${local} is not a directory`);
  const patterns = [...exclude];
  try {
    patterns.push(...(await fs.readFile(path.join(root, ".coveignore"), "utf8")).split("\n"));
  } catch {
    // none
  }
  async function* walk(dir: string, relDir: string): AsyncGenerator<Uint8Array> {
    const names = (await fs.readdir(dir)).sort();
    for (const name of names) {
      const rel = relDir ? relDir + "/" + name : name;
      if (ignored(rel, patterns)) continue;
      const full = path.join(dir, name);
      const ls = await fs.lstat(full);
      const mtime = ls.mtimeMs / 1000;
      const out: Uint8Array[] = [];
      if (ls.isSymbolicLink()) {
        const target = await fs.readlink(full);
        const resolved = path.resolve(path.dirname(full), target);
        if (path.isAbsolute(target) || !(resolved === root || resolved.startsWith(root + path.sep))) {
          throw new InvalidArgument(`${rel} is a symlink to ${target}, outside the folder`);
        }
        entry(out, rel, "2", 0o777, mtime, undefined, target);
        yield* out;
      } else if (ls.isDirectory()) {
        entry(out, rel + "/", "5", ls.mode, mtime);
        yield* out;
        yield* walk(full, rel);
      } else if (ls.isFile()) {
        entry(out, rel, "0", ls.mode, mtime, undefined, "", ls.size);
        yield* out;
        // The header promised ls.size bytes: exactly those are sent, and a
        // file that shrank meanwhile fails the archive.
        const fh = await fs.open(full, "r");
        try {
          let left = ls.size;
          while (left > 0) {
            const buf = new Uint8Array(Math.min(PIECE, left));
            const { bytesRead } = await fh.read(buf, 0, buf.length, ls.size - left);
            if (bytesRead === 0) throw new InvalidArgument(`${rel} shrank while it was packed`);
            left -= bytesRead;
            yield buf.subarray(0, bytesRead);
          }
        } finally {
          await fh.close();
        }
        yield pad(ls.size);
      }
      // other kinds (sockets, devices, fifos) are left out
    }
  }
  yield* walk(root, "");
  yield new Uint8Array(1024);
}

function readStr(b: Uint8Array, off: number, len: number): string {
  let end = off;
  while (end < off + len && b[end] !== 0) end++;
  return dec.decode(b.subarray(off, end));
}

function readOctal(b: Uint8Array, off: number, len: number): number {
  if (b[off] & 0x80) {
    // base-256
    let n = 0;
    for (let i = off + 1; i < off + len; i++) n = n * 256 + b[i];
    return n;
  }
  const s = readStr(b, off, len).trim();
  return s ? parseInt(s, 8) : 0;
}

function parsePax(body: Uint8Array): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i < body.length) {
    let sp = i;
    while (sp < body.length && body[sp] !== 0x20) sp++;
    const len = parseInt(dec.decode(body.subarray(i, sp)), 10);
    if (!len) break;
    const rec = dec.decode(body.subarray(sp + 1, i + len - 1));
    const eq = rec.indexOf("=");
    out[rec.slice(0, eq)] = rec.slice(eq + 1);
    i += len;
  }
  return out;
}

/** Extract tar.gz bytes into local, refusing entries that leave it. */
export async function unpack(archive: Uint8Array, local: string): Promise<void> {
  const { fs, path, zlib } = await node();
  const root = path.resolve(local);
  await fs.mkdir(root, { recursive: true });
  const b = new Uint8Array(zlib.gunzipSync(archive));
  const dirs: Array<[string, number]> = [];
  let off = 0;
  let pax: Record<string, string> = {};
  let longName = "";
  let longLink = "";
  while (off + 512 <= b.length) {
    const h = b.subarray(off, off + 512);
    if (h.every((x) => x === 0)) break;
    let name = readStr(h, 0, 100);
    const prefix = readStr(h, 345, 155);
    if (prefix && readStr(h, 257, 5) === "ustar") name = prefix + "/" + name;
    const mode = readOctal(h, 100, 8);
    const size = readOctal(h, 124, 12);
    const type = String.fromCharCode(h[156] || 0x30);
    let linkname = readStr(h, 157, 100);
    const data = b.subarray(off + 512, off + 512 + size);
    off += 512 + Math.ceil(size / 512) * 512;
    if (type === "x") { pax = parsePax(data); continue; }
    if (type === "g") continue;
    if (type === "L") { longName = readStr(data, 0, data.length); continue; }
    if (type === "K") { longLink = readStr(data, 0, data.length); continue; }
    if (pax.path) name = pax.path;
    else if (longName) name = longName;
    if (pax.linkpath) linkname = pax.linkpath;
    else if (longLink) linkname = longLink;
    pax = {};
    longName = longLink = "";

    const norm = path.normalize(name);
    const dest = path.resolve(root, norm);
    if (path.isAbsolute(name) || norm.startsWith("..") || !(dest === root || dest.startsWith(root + path.sep))) {
      throw new InvalidArgument(`archive entry ${JSON.stringify(name)} leaves ${local}`);
    }
    if (type === "2") {
      const t = path.resolve(path.dirname(dest), linkname);
      if (path.isAbsolute(linkname) || !(t === root || t.startsWith(root + path.sep))) {
        throw new InvalidArgument(`archive symlink ${JSON.stringify(name)} points outside ${local}`);
      }
    }
    if (dest === root) continue;
    if (type === "5") {
      await fs.mkdir(dest, { recursive: true });
      dirs.push([dest, mode & 0o7777]);
    } else if (type === "0" || type === "\0" || type === "7") {
      await fs.mkdir(path.dirname(dest), { recursive: true });
      await fs.rm(dest, { force: true });
      await fs.writeFile(dest, data);
      await fs.chmod(dest, mode & 0o7777);
    } else if (type === "2") {
      await fs.mkdir(path.dirname(dest), { recursive: true });
      await fs.rm(dest, { force: true });
      await fs.symlink(linkname, dest);
    }
    // hard links and special files are left out
  }
  // Directories get their modes last, so that a read-only one still
  // received its files.
  for (const [d, m] of dirs.reverse()) await fs.chmod(d, m);
}
