// The sandbox page's tabs, in the order they are shown; the first is the
// default.
import type { Tab } from "./tab";
import commands from "./tabs/commands";
import files from "./tabs/files";
import terminal from "./tabs/terminal";
import metrics from "./tabs/metrics";
import events from "./tabs/events";
import network from "./tabs/network";
import snapshots from "./tabs/snapshots";
import usage from "./tabs/usage";

export const TABS: Tab[] = [terminal, files, commands, snapshots, metrics, events, network, usage];
