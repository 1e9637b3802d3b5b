// A tab of the sandbox page. Each tab is mounted the first time it is
// shown and kept (hidden) while the page is open, so a terminal stays
// attached and live views keep following; close() runs when the page is
// left.
import type { SandboxInfo } from "@cove-dev/sdk";

export interface TabContext {
  /** The sandbox as last read (the header refreshes it on every event). */
  sandbox(): SandboxInfo;
  /** onChange calls f after every refresh of the sandbox. */
  onChange(f: (sb: SandboxInfo) => void): void;
  /** refresh reads the sandbox again now (after an action of the tab). */
  refresh(): Promise<void>;
  /** The tab's own element. */
  el: HTMLElement;
}

export interface TabView {
  /** show runs each time the tab becomes visible (charts measure here). */
  show?(): void;
  close(): void;
}

export interface Tab {
  /** The path segment: /sandboxes/<ref>/<id>. */
  id: string;
  label: string;
  mount(ctx: TabContext): TabView;
}
