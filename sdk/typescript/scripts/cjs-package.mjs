// Marks dist/cjs as CommonJS: the package is "type": "module", so without
// this Node (and TypeScript) would read the .js and .d.ts files there as
// ES modules.
import { writeFileSync } from "node:fs";

writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), JSON.stringify({ type: "commonjs" }) + "\n");
