// The sandbox page's tabs, in the order they are shown; the first is the
// default.
import type { Tab } from "./tab";
import terminal from "./tabs/terminal";
import metrics from "./tabs/metrics";
import events from "./tabs/events";
import network from "./tabs/network";
import usage from "./tabs/usage";

export const TABS: Tab[] = [terminal, metrics, events, network, usage];
