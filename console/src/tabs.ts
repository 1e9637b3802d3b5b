// The sandbox page's tabs, in the order they are shown; the first is the
// default.
import type { Tab } from "./tab";
import terminal from "./tabs/terminal";

export const TABS: Tab[] = [terminal];
