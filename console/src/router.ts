// Routing: pages are functions of the path; leaving a page runs what it
// registered in teardown (streams closed, terminals detached).
import { key, setKey, whenSignedOut } from "./api";

export const app = document.getElementById("app")!;
let teardown: (() => void)[] = [];
const pages: { match: RegExp; page: (m: RegExpMatchArray) => void }[] = [];
let home: () => void = () => {};
let signIn: () => void = () => {};

/** onLeave registers f to run when the page is left. */
export function onLeave(f: () => void) {
  teardown.push(f);
}

export function page(match: RegExp, f: (m: RegExpMatchArray) => void) {
  pages.push({ match, page: f });
}

export function start(signInPage: () => void, homePage: () => void) {
  signIn = signInPage;
  home = homePage;
}

export function navigate(path: string) {
  history.pushState(null, "", path);
  route();
}

/** replace changes the address without a new page (a tab switch). */
export function replace(path: string) {
  history.replaceState(null, "", path);
}

export function signOut() {
  setKey(null);
  route();
}

export function route() {
  for (const f of teardown) f();
  teardown = [];
  app.replaceChildren();
  if (!key()) return signIn();
  for (const p of pages) {
    const m = location.pathname.match(p.match);
    if (m) return p.page(m);
  }
  return home();
}

whenSignedOut(signOut);
window.addEventListener("popstate", route);
