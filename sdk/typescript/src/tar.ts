// Folders as tar.gz, on Node only (imported when first used, so browsers
// never load node:fs). Packing walks the folder itself, to apply the
// .coveignore files and exclude patterns with gitignore's rules (the
// `ignore` package) and to refuse symlinks that leave the folder; the
// archive is written and read by the `tar` package. Modes, symlinks inside
// the folder and empty directories are kept.

import { InvalidArgument } from "./errors.js";

async function node() {
  const [fs, path, os, tar, ignore] = await Promise.all([
    import("node:fs/promises"), import("node:path"), import("node:os"), import("tar"), import("ignore"),
  ]);
  return { fs, path, os, tar, ignore: ignore.default };
}

/** The name of the files whose patterns leave paths out of an upload. */
export const IGNORE_FILE = ".coveignore";

/** The paths (relative, "/"-separated, directories first and without a
 * trailing slash) that an upload of the folder root sends: every entry
 * but those the exclude patterns or a .coveignore file leave out, with
 * gitignore's rules (a .coveignore in a subfolder applies below it, its
 * patterns relative to it). .coveignore files themselves are always sent. */
export async function listUpload(root: string, exclude: string[] = []): Promise<string[]> {
  const { fs, path, ignore } = await node();
  type Rules = { base: string; ig: ReturnType<typeof ignore> };
  const top = ignore().add(exclude);
  const out: string[] = [];
  function ignored(rel: string, dir: boolean, rules: Rules[]): boolean {
    // The deepest file that says anything about the path decides, as in git.
    let verdict = false;
    for (const r of rules) {
      const sub = r.base ? rel.slice(r.base.length + 1) : rel;
      const t = r.ig.test(dir ? sub + "/" : sub);
      if (t.ignored) verdict = true;
      else if (t.unignored) verdict = false;
    }
    return verdict;
  }
  async function walk(dir: string, relDir: string, rules: Rules[]): Promise<void> {
    let here = rules;
    const text = await fs.readFile(path.join(dir, IGNORE_FILE), "utf8").catch(() => null);
    if (text !== null) here = [...rules, { base: relDir, ig: ignore().add(text) }];
    const entries = (await fs.readdir(dir, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      const rel = relDir ? relDir + "/" + e.name : e.name;
      const isDir = e.isDirectory();
      if (e.name !== IGNORE_FILE && ignored(rel, isDir, here)) continue;
      out.push(rel);
      if (isDir) await walk(path.join(dir, e.name), rel, here);
    }
  }
  await walk(root, "", [{ base: "", ig: top }]);
  return out;
}

async function checkedEntries(local: string, exclude: string[]): Promise<{ root: string; entries: string[] }> {
  const { fs, path } = await node();
  const root = path.resolve(local);
  const st = await fs.stat(root).catch(() => null);
  if (!st || !st.isDirectory()) throw new InvalidArgument(`${local} is not a directory`);
  const entries = await listUpload(root, exclude);
  for (const rel of entries) {
    const full = path.join(root, rel);
    const ls = await fs.lstat(full);
    if (!ls.isSymbolicLink()) continue;
    const target = await fs.readlink(full);
    const resolved = path.resolve(path.dirname(full), target);
    if (path.isAbsolute(target) || !(resolved === root || resolved.startsWith(root + path.sep))) {
      throw new InvalidArgument(`${rel} is a symlink to ${target}, outside the folder`);
    }
  }
  return { root, entries };
}

/** A local folder packed as tar.gz into the file dest (never whole in
 * memory); answers the sha-256 (hex) of what was written. exclude
 * patterns and .coveignore files are honoured; a symlink that leaves the
 * folder is refused. */
export async function packDirToFile(local: string, dest: string, exclude: string[] = []): Promise<string> {
  const { tar } = await node();
  const { root, entries } = await checkedEntries(local, exclude);
  // Each entry is named on its own (noDirRecurse), so that what the walk
  // left out stays out; portable drops the owner and the host's details.
  await tar.create({ gzip: true, cwd: root, file: dest, portable: true, noDirRecurse: true, mode: 0o600 } as never, entries.length ? entries : []);
  const { hashFile } = await import("./nodefile.js");
  return hashFile(dest);
}

/** A local folder as tar.gz bytes, packed as for an upload. */
export async function packDir(local: string, exclude: string[] = []): Promise<Uint8Array> {
  const { fs, path, os } = await node();
  const tmp = await fs.mkdtemp(path.join(os.tmpdir(), "cove-pack-"));
  try {
    const file = path.join(tmp, "folder.tar.gz");
    await packDirToFile(local, file, exclude);
    return new Uint8Array(await fs.readFile(file));
  } finally {
    await fs.rm(tmp, { recursive: true, force: true });
  }
}

/** Extract tar.gz bytes into the folder local, refusing (InvalidArgument)
 * an archive with an entry that would leave it, a symlink pointing out of
 * it included; hard links and special files are left out. */
export async function unpack(archive: Uint8Array, local: string): Promise<void> {
  const { fs, path, tar } = await node();
  const root = path.resolve(local);
  await fs.mkdir(root, { recursive: true });
  // Checked whole first, so that nothing is written from a hostile archive.
  const bad: string[] = [];
  const parser = new tar.Parser({
    onReadEntry: (e) => {
      const name = e.path;
      const dest = path.resolve(root, name);
      if (path.isAbsolute(name) || name.split("/").includes("..") || !(dest === root || dest.startsWith(root + path.sep))) {
        bad.push(`archive entry ${JSON.stringify(name)} leaves ${local}`);
      } else if (e.type === "SymbolicLink") {
        const link = e.linkpath ?? "";
        const t = path.resolve(path.dirname(dest), link);
        if (path.isAbsolute(link) || !(t === root || t.startsWith(root + path.sep))) {
          bad.push(`archive symlink ${JSON.stringify(name)} points outside ${local}`);
        }
      }
      e.resume();
    },
  });
  await new Promise<void>((resolve, reject) => {
    parser.on("error", reject);
    parser.on("end", () => resolve());
    parser.end(Buffer.from(archive.buffer, archive.byteOffset, archive.byteLength));
  });
  if (bad.length) throw new InvalidArgument(bad[0]);
  const { Readable } = await import("node:stream");
  const { pipeline } = await import("node:stream/promises");
  await pipeline(
    Readable.from([Buffer.from(archive.buffer, archive.byteOffset, archive.byteLength)]),
    tar.extract({
      cwd: root, strict: true, preservePaths: false,
      filter: (_p, e) => "type" in e && ["File", "OldFile", "ContiguousFile", "Directory", "SymbolicLink"].includes(e.type as string),
    }),
  );
}
