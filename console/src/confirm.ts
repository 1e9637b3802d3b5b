// A modal question before an action that cannot be undone: a <dialog>
// with Cancel focused (Enter or Escape cancels), the action's own button
// beside it. The text is set with textContent: names in it stay text.
import { h } from "./dom";
import { app } from "./router";

/** ask shows the dialog id and resolves true when yes is chosen. The
 * dialog's parts are id, id-title, id-text, id-yes and id-no. */
export function ask(id: string, title: string, text: string, yes: string): Promise<boolean> {
  document.getElementById(id)?.remove();
  const yesB = h("button", { id: id + "-yes", class: "danger" }, yes);
  const noB = h("button", { id: id + "-no" }, "Cancel");
  const dlg = h(
    "dialog",
    { id, "aria-labelledby": id + "-title", "aria-describedby": id + "-text" },
    h("h2", { id: id + "-title" }, title),
    h("p", { id: id + "-text" }, text),
    h("div", { class: "actions" }, noB, yesB),
  );
  const back = document.activeElement as HTMLElement | null;
  yesB.addEventListener("click", () => dlg.close("yes"));
  noB.addEventListener("click", () => dlg.close("no"));
  app.append(dlg);
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => {
      resolve(dlg.returnValue === "yes");
      dlg.remove();
      back?.focus();
    });
    dlg.returnValue = "";
    dlg.showModal();
    noB.focus();
  });
}
