// What the tests share: the server they run against (COVE_URL and
// COVE_API_KEY; make test starts one, see internal/e2e/sdks), a TCP proxy
// that cuts its connections, and a folder to send and compare.

import { createServer, connect, Server, Socket } from "node:net";
import { randomBytes } from "node:crypto";
import { chmod, lstat, mkdir, readFile, readdir, readlink, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";

export const URL_ = process.env.COVE_URL ?? "";
export const KEY = process.env.COVE_API_KEY ?? "";
/** Why the server tests are skipped, or false when they run. */
export const skip: string | false = URL_ && KEY ? false : "COVE_URL and COVE_API_KEY name no server";

export function name(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

/** A TCP proxy on loopback whose open connections can be cut at once, to
 * break a stream in the middle. */
export class CuttingProxy {
  accepted = 0;
  port = 0;
  private conns: Socket[] = [];
  private server: Server;

  constructor(private readonly target: { host: string; port: number }) {
    this.server = createServer((c) => {
      this.accepted++;
      const u = connect(this.target.port, this.target.host);
      this.conns.push(c, u);
      c.pipe(u);
      u.pipe(c);
      const kill = () => { c.destroy(); u.destroy(); };
      c.on("error", kill);
      u.on("error", kill);
      c.on("close", kill);
      u.on("close", kill);
    });
  }

  static async start(url: string): Promise<CuttingProxy> {
    const u = new URL(url);
    const p = new CuttingProxy({ host: u.hostname, port: Number(u.port || 80) });
    await new Promise<void>((r) => p.server.listen(0, "127.0.0.1", r));
    p.port = (p.server.address() as { port: number }).port;
    return p;
  }

  cut(): void {
    const conns = this.conns;
    this.conns = [];
    for (const s of conns) s.destroy();
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/** A folder with nested dirs, an executable, an internal symlink and an
 * empty dir. */
export async function makeTree(root: string): Promise<void> {
  await mkdir(join(root, "src", "pkg"), { recursive: true });
  await mkdir(join(root, "empty"), { recursive: true });
  await writeFile(join(root, "src", "pkg", "mod.py"), "X = 1\n");
  await writeFile(join(root, "run.sh"), "#!/bin/sh\necho ran\n");
  await chmod(join(root, "run.sh"), 0o755);
  await writeFile(join(root, "data.bin"), randomBytes(300_000));
  await mkdir(join(root, "a".repeat(60), "b".repeat(60)), { recursive: true });
  await writeFile(join(root, "a".repeat(60), "b".repeat(60), "long-name.txt"), "deep\n");
  await symlink("src/pkg/mod.py", join(root, "link.py"));
}

/** What a folder holds: every path with its kind, mode and content. */
export async function tree(root: string): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  const walk = async (dir: string, rel: string) => {
    for (const n of (await readdir(dir)).sort()) {
      const full = join(dir, n);
      const r = rel ? rel + "/" + n : n;
      const st = await lstat(full);
      if (st.isSymbolicLink()) out[r] = ["link", await readlink(full)];
      else if (st.isDirectory()) {
        out[r] = ["dir", st.mode & 0o777];
        await walk(full, r);
      } else out[r] = ["file", st.mode & 0o777, (await readFile(full)).toString("base64")];
    }
  };
  await walk(root, "");
  return out;
}
