// The cove web console: sign in with an API key (kept in sessionStorage,
// never in a URL), the team's sandboxes, and a sandbox's page with its
// tabs. Calls go through the TypeScript SDK. Nothing a sandbox produces is
// rendered as HTML: text goes through textContent, xterm.js or the editor.
import "./style.css";
import { key, setKey } from "./api";
import { h, message } from "./dom";
import { listPage } from "./list";
import { app, page, route, start } from "./router";
import { sandboxPage } from "./sandbox";
import { loadTeam } from "./team";
import { teamPage } from "./team-page";
import { usagePage } from "./usage-page";

function signIn() {
  const input = h("input", { id: "key", type: "password", autocomplete: "off", placeholder: "cove_…", required: true });
  const err = h("p", { class: "error", id: "signin-error", role: "alert" });
  const form = h(
    "form",
    { id: "signin", class: "card signin" },
    h("h1", {}, "cove console"),
    h("label", { for: "key" }, "API key"),
    input,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    h("p", { class: "muted" }, "The key stays in this tab's session storage."),
    err,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    setKey(input.value.trim());
    try {
      await loadTeam();
      route();
    } catch (x) {
      setKey(null);
      err.textContent = message(x);
    }
  });
  app.append(form);
  input.focus();
}

page(/^\/sandboxes\/([^/]+)(?:\/([a-z-]+))?\/?$/, (m) => sandboxPage(decodeURIComponent(m[1]), m[2] ?? ""));
page(/^\/usage\/?$/, () => usagePage());
page(/^\/team\/?$/, () => teamPage());
start(signIn, listPage);
if (key()) loadTeam().catch(() => {});
route();
