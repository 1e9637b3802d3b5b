// The sandbox page's tabs, in the order they are shown; the first is the
// default.
import type { Tab } from "./tab";
import commands from "./tabs/commands";
import files from "./tabs/files";
import terminal from "./tabs/terminal";

export const TABS: Tab[] = [terminal, files, commands];
