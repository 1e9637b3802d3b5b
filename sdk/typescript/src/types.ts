// The API's objects as they come on the wire (snake_case, as documented in
// the API). Fields a newer server adds are kept as they come.

export interface SandboxInfo {
  id: string;
  name: string;
  team_id: string;
  template: string;
  state: string;
  state_reason?: string;
  resources?: { cpus?: number; memory_mib?: number; disk_mib?: number };
  workdir: string;
  network?: Record<string, any>;
  labels?: Record<string, string>;
  env?: Record<string, string>;
  secrets?: Record<string, string>;
  idle_timeout_s?: number;
  on_idle?: string;
  max_lifetime_s?: number;
  spend_limit_usd?: number;
  cost_usd?: number;
  created_at?: string;
  started_at?: string;
  last_active_at?: string;
  expires_at?: string;
  [field: string]: any;
}

/** Every field of POST /v1/sandboxes (all optional); cpus, memory_mib and
 * disk_mib are shortcuts for resources. */
export interface CreateOptions {
  name?: string;
  template?: string;
  resources?: { cpus?: number; memory_mib?: number; disk_mib?: number; [k: string]: unknown };
  cpus?: number;
  memory_mib?: number;
  disk_mib?: number;
  env?: Record<string, string>;
  secrets?: Record<string, string>;
  workdir?: string;
  network?: { allow?: string[]; [k: string]: unknown };
  source?: { type: string; [k: string]: unknown };
  setup?: { command?: string; network?: { allow?: string[] }; timeout_s?: number; [k: string]: unknown };
  idle_timeout_s?: number;
  on_idle?: string;
  max_lifetime_s?: number;
  spend_limit_usd?: number;
  labels?: Record<string, string>;
  [field: string]: unknown;
}

export interface CommandInfo {
  id: string;
  sandbox_id: string;
  command?: string;
  argv?: string[];
  cwd?: string;
  state: string;
  exit_code?: number | null;
  signal?: string;
  timed_out?: boolean;
  started_at?: string;
  ended_at?: string;
  stdout_bytes?: number;
  stderr_bytes?: number;
  [field: string]: any;
}

/** What run returns: the ended command and its output as text. */
export interface CommandResult {
  command: CommandInfo;
  stdout: string;
  stderr: string;
  truncated: boolean;
  exitCode: number | null;
}

/** One record of a command's output: a chunk of a stream, or the exit
 * (type "exit"), or the mark where recording stopped (type "truncated"). */
export interface Chunk {
  seq: number;
  stream: string;
  data: Uint8Array;
  type: string;
  exitCode: number | null;
  signal: string;
  timedOut: boolean;
}

export interface FileEntry {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | string;
  size: number;
  mode: string;
  mtime: string;
  version: string;
  [field: string]: any;
}

export interface Event {
  id: string;
  type: string;
  sandbox_id?: string;
  command_id?: string;
  time: string;
  data?: Record<string, any>;
  [field: string]: any;
}

/** One page of a list, and the cursor of the next ("" at the end). */
export interface Page<T> {
  items: T[];
  next_cursor: string;
}

export interface Secret {
  name: string;
  created_at: string;
  updated_at: string;
  [field: string]: any;
}

export interface Team {
  id: string;
  name: string;
  [field: string]: any;
}

/** A stored archive of a folder, kept once per team and sha-256 (hex). */
export interface Asset {
  id: string;
  team_id: string;
  name: string;
  size: number;
  sha256: string;
  created_at: string;
  [field: string]: any;
}

/** A published port of a sandbox, served at its own host (url:
 * <port>-<sandbox id>.<preview domain>, never the API's). token and link
 * come only in the answer that created a private preview. */
export interface Preview {
  id: string;
  sandbox_id: string;
  port: number;
  visibility: "private" | "public" | string;
  wake: boolean;
  url: string;
  created_at: string;
  token?: string;
  link?: string;
  [field: string]: any;
}

/** A template the team may create sandboxes of, and its state. */
export interface Template {
  name: string;
  kind: "managed" | "image" | string;
  status: "building" | "ready" | "failed" | string;
  progress?: string;
  reason?: string;
  qualified: boolean;
  self_test?: Record<string, any>;
  [field: string]: any;
}

/** The key's own team: its admission flags and limits. */
export interface TeamMe {
  team: Team;
  admin: boolean;
  admitted: string[];
  limits: Record<string, any>;
  [field: string]: any;
}

/** What a workload reserves while it runs. */
export interface WorkloadResources {
  cpus?: number;
  memory_mib?: number;
  disk_mib?: number;
  gpus?: number;
  gpu_type?: string;
  [k: string]: unknown;
}

/** Every field of POST /v1/workloads: a command (shell string) or argv,
 * in a template or an imported image (by name). */
export interface WorkloadOptions {
  command?: string;
  argv?: string[];
  template?: string;
  image?: string;
  source?: { type: string; [k: string]: unknown };
  env?: Record<string, string>;
  secrets?: Record<string, string>;
  workdir?: string;
  user?: string;
  resources?: WorkloadResources;
  timeout_s?: number;
  max_queue_s?: number;
  labels?: Record<string, string>;
  [field: string]: unknown;
}

/** A batch run: queued until a node can place it, then run to completion
 * in a container of its own. */
export interface Workload {
  id: string;
  team_id: string;
  template: string;
  command?: string;
  argv?: string[];
  workdir: string;
  user: string;
  resources: WorkloadResources;
  timeout_s: number;
  max_queue_s: number;
  labels: Record<string, string>;
  state: "queued" | "starting" | "running" | "exited" | "failed" | "cancelled" | string;
  state_reason: string;
  devices: string[];
  exit_code: number | null;
  signal: string;
  timed_out: boolean;
  cost_usd: number;
  created_at: string;
  started_at: string | null;
  ended_at: string | null;
  stdout_bytes: number;
  stderr_bytes: number;
  [field: string]: any;
}

/** cove's settings of an imported image (at import, or by updateImage):
 * a field left out keeps its value. */
export interface ImageSettings {
  defaults?: Record<string, any>;
  limits?: Record<string, any>;
  admission?: { mode: "owner" | "teams" | "all" | string; teams?: string[] };
  examples?: string[];
  [field: string]: unknown;
}

/** An image imported from an OCI artifact, usable as a template by its
 * name (another team's, by `template`: TEAM/NAME). */
export interface Image {
  id: string;
  name: string;
  /** How the calling team names the image as a template. */
  template: string;
  team_id: string;
  digest: string;
  size_bytes: number;
  config: Record<string, any>;
  defaults: Record<string, any>;
  limits: Record<string, any>;
  admission: { mode: string; teams: string[] };
  examples: string[];
  created_at: string;
  updated_at: string;
  [field: string]: any;
}
