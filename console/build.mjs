// Builds the console into ../internal/console/dist, embedded by the Go
// package there. Asset names carry a hash of their content, so they are
// cached for good; index.html names them and is revalidated.
import * as esbuild from "esbuild";
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";

const out = new URL("../internal/console/dist/", import.meta.url).pathname;
for (const f of readdirSync(out, { withFileTypes: true })) {
  if (!f.name.startsWith(".")) rmSync(out + f.name, { recursive: true });
}
mkdirSync(out, { recursive: true });
const res = await esbuild.build({
  entryPoints: ["src/main.ts"],
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  write: false,
  outdir: "out",
  loader: { ".css": "css" },
  legalComments: "none",
  // Calls go through the TypeScript SDK, bundled from its sources; what
  // it loads only on Node stays out.
  alias: { "@cove-dev/sdk": new URL("../sdk/typescript/src/index.ts", import.meta.url).pathname },
  external: ["node:*", "ws", "tar", "ignore"],
});
const names = {};
for (const f of res.outputFiles) {
  const ext = f.path.endsWith(".css") ? "css" : "js";
  const hash = createHash("sha256").update(f.contents).digest("hex").slice(0, 12);
  names[ext] = `app.${hash}.${ext}`;
  writeFileSync(out + names[ext], f.contents);
}
const html = readFileSync("src/index.html", "utf8")
  .replace("%CSS%", "/" + names.css)
  .replace("%JS%", "/" + names.js);
writeFileSync(out + "index.html", html);
console.log("console built:", Object.values(names).join(", "));
