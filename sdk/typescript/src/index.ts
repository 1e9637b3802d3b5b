// cove's TypeScript SDK: sandboxes for AI agents over the cove REST API.

export { Client, Sandbox, Command, Files, FileContent, DEFAULT_URL, STREAM_RETRIES, assetSource, workloadDone } from "./client.js";
export type { CallOptions, ClientOptions, CommandOptions, OutputOptions, StartOptions, WakeOption } from "./client.js";
export { Attachment } from "./attach.js";
export type { AttachOptions, ExitInfo } from "./attach.js";
export { IGNORE_FILE, listUpload, packDir, unpack } from "./tar.js";
export * from "./errors.js";
export type * from "./types.js";
