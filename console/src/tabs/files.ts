// The files tab: a tree of the sandbox's files (a folder is listed when it
// is opened, and again when a watch of the tree says its entries changed), a CodeMirror editor that saves with the version it read (a
// change by someone else in between becomes a conflict dialog), uploads by
// drag and drop or a file picker with progress, and downloads checked
// against the server's sha-256. File contents are only ever text in the
// editor or bytes in a blob: never markup.
import { EditorView, minimalSetup } from "codemirror";
import { EditorState } from "@codemirror/state";
import { highlightActiveLine, highlightActiveLineGutter, keymap, lineNumbers } from "@codemirror/view";
import { MergeView } from "@codemirror/merge";
import { Files } from "@cove-dev/sdk";
import type { FileEntry } from "@cove-dev/sdk";
import { key, sdk, status } from "../api";
import { h, message } from "../dom";
import { b64, sha256, verify } from "../files-digest";
import type { Tab, TabContext } from "../tab";
import "../files.css";

/** shadow gives an element a shadow root for CodeMirror: there its styles
 * go in as constructed style sheets, which the console's CSP (style-src
 * 'self') allows, where a <style> element in the document would be
 * refused. */
function shadow(host: HTMLElement): { root: ShadowRoot; box: HTMLElement } {
  const root = host.shadowRoot ?? host.attachShadow({ mode: "open" });
  let box = root.firstElementChild as HTMLElement | null;
  if (!box) {
    box = document.createElement("div");
    box.className = "cm-host";
    root.append(box);
  }
  return { root, box };
}

/** The editor's look (inside the shadow root). */
const look = EditorView.theme(
  {
    "&": { backgroundColor: "#0b0d11", color: "#e6e6e6", fontSize: "13px" },
    ".cm-scroller": { fontFamily: "ui-monospace, monospace" },
    ".cm-gutters": { backgroundColor: "#14171d", color: "#8a93a3", borderRight: "1px solid #2a2f3a" },
    ".cm-activeLine": { backgroundColor: "#ffffff08" },
    ".cm-activeLineGutter": { backgroundColor: "#ffffff10" },
    "&.cm-focused": { outline: "2px solid #4f8cff" },
    ".cm-cursor": { borderLeftColor: "#e6e6e6" },
    "&.cm-focused .cm-selectionBackground, .cm-selectionBackground, ::selection": { backgroundColor: "#2f4a7a" },
  },
  { dark: true },
);

/** The editor's height (the diff's sides take what they need). */
const tall = EditorView.theme({ "&": { height: "60vh" } });

/** Uploads up to this size go with their sha-256 (computed in memory). */
const DIGEST_MAX = 256 << 20;

/** Files past this size are not opened in the editor (download instead). */
const EDIT_MAX = 2 << 20;

interface Open {
  path: string;
  version: string;
  view: EditorView;
}

const tab: Tab = {
  id: "files",
  label: "Files",
  mount(ctx: TabContext) {
    const sid = () => ctx.sandbox().id;
    const files = async () => new Files(sdk(), sid());
    const root = ctx.sandbox().workdir || "/";

    const tree = h("ul", { class: "ftree", id: "files-tree", role: "tree", "aria-label": "Files" });
    const picker = h("input", { type: "file", id: "files-pick", multiple: true, class: "visually-hidden" });
    const pickB = h("button", { id: "files-upload", title: "Upload files into the selected folder" }, "Upload…");
    const target = h("span", { class: "muted mono", id: "files-target" });
    const progress = h("progress", { id: "files-progress", max: "1", value: "0" });
    progress.hidden = true;
    const upStatus = h("span", { class: "muted", id: "files-upstatus", role: "status" });
    const pathL = h("span", { class: "mono fpath", id: "file-path" }, "no file open");
    const saveB = h("button", { id: "file-save", class: "primary", title: "Save (Ctrl+S)" }, "Save");
    const dlB = h("button", { id: "file-download" }, "Download");
    const verified = h("span", { id: "file-verified", class: "muted" });
    const fstatus = h("span", { class: "muted", id: "file-status", role: "status" });
    const edBox = h("div", { class: "feditor", id: "file-editor" });
    const note = h("p", { class: "muted", id: "file-note" }, "Open a file from the tree; drop files here to upload them.");
    saveB.disabled = dlB.disabled = true;
    const main = h(
      "div",
      { class: "fmain" },
      h("div", { class: "fbar" }, pathL, h("span", { class: "fbtns" }, saveB, dlB), verified, fstatus),
      note,
      edBox,
    );
    const side = h(
      "div",
      { class: "fside" },
      h("div", { class: "fbar" }, pickB, picker, target),
      h("div", { class: "fbar" }, progress, upStatus),
      tree,
    );
    const wrap = h("div", { class: "files", id: "files" }, side, main);
    const dialog = conflictDialog();
    ctx.el.append(wrap, dialog.el);

    let open: Open | null = null;
    let dir = root; // the folder uploads land in
    const setDir = (d: string) => {
      dir = d;
      target.textContent = "→ " + d;
      for (const b of tree.querySelectorAll<HTMLElement>("[data-dir-selected]")) delete b.dataset.dirSelected;
      tree.querySelector<HTMLElement>(`[data-path="${CSS.escape(d)}"]`)?.setAttribute("data-dir-selected", "");
    };

    // -- the tree --
    const list = async (path: string, into: HTMLElement) => {
      into.replaceChildren(h("li", { class: "muted" }, "…"));
      try {
        const items = (await (await files()).list(path)).filter((e) => e.path !== path);
        items.sort((a, b) => (a.type === "dir" ? 0 : 1) - (b.type === "dir" ? 0 : 1) || a.name.localeCompare(b.name));
        into.replaceChildren(...items.map(node));
        if (!items.length) into.append(h("li", { class: "muted" }, "empty"));
      } catch (x) {
        into.replaceChildren(h("li", { class: "error" }, message(x)));
      }
    };
    const node = (e: FileEntry): HTMLElement => {
      const isDir = e.type === "dir";
      const b = h("button", { class: "fnode " + (isDir ? "fdir" : "ffile"), "data-path": e.path, "data-type": e.type }, e.name);
      const li = h("li", { role: "treeitem" }, b);
      if (isDir) {
        const kids = h("ul", { role: "group" });
        kids.hidden = true;
        li.append(kids);
        li.setAttribute("aria-expanded", "false");
        b.addEventListener("click", () => {
          const opening = kids.hidden;
          kids.hidden = !opening;
          li.setAttribute("aria-expanded", String(opening));
          setDir(opening ? e.path : parentOf(e.path));
          if (opening) list(e.path, kids);
        });
      } else {
        b.title = `${e.size} bytes`;
        b.addEventListener("click", () => openFile(e.path));
      }
      return li;
    };
    // Arrow keys move between the visible entries; Tab leaves the tree.
    tree.addEventListener("keydown", (e) => {
      if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
      const all = Array.from(tree.querySelectorAll<HTMLElement>(".fnode")).filter((b) => b.offsetParent !== null);
      const i = all.indexOf(document.activeElement as HTMLElement);
      const next = all[i + (e.key === "ArrowDown" ? 1 : -1)];
      if (next) {
        e.preventDefault();
        next.focus();
      }
    });
    const reloadTree = () => list(root, tree).then(() => setDir(dir));

    // -- the editor --
    const show = (path: string, text: string, version: string) => {
      open?.view.destroy();
      note.hidden = true;
      const { root, box } = shadow(edBox);
      const view = new EditorView({
        root,
        parent: box,
        state: EditorState.create({
          doc: text,
          extensions: [minimalSetup, lineNumbers(), highlightActiveLine(), highlightActiveLineGutter(), look, tall, keymap.of([{ key: "Mod-s", preventDefault: true, run: () => (save(), true) }]), EditorView.lineWrapping],
        }),
      });
      view.contentDOM.setAttribute("aria-label", "Contents of " + path);
      open = { path, version, view };
      edBox.dataset.version = version;
      edBox.dataset.path = path;
      saveB.disabled = false;
    };
    const closeEditor = (why: string) => {
      open?.view.destroy();
      open = null;
      shadow(edBox).box.replaceChildren();
      delete edBox.dataset.version;
      saveB.disabled = true;
      note.hidden = false;
      note.textContent = why;
    };
    const openFile = async (path: string) => {
      pathL.textContent = path;
      dlB.disabled = false;
      dlB.dataset.path = path;
      verified.textContent = "";
      delete verified.dataset.verified;
      fstatus.textContent = "opening…";
      try {
        const st = await (await files()).stat(path);
        if (st.size > EDIT_MAX) {
          closeEditor(`${path} is ${st.size} bytes, too large to edit here: download it.`);
          fstatus.textContent = "";
          return;
        }
        const got = await fetchFile(sid(), path);
        mark(got.verdict.ok, got.verdict.hex, got.verdict.why);
        if (!got.verdict.ok) {
          closeEditor(`${path} did not arrive intact: ${got.verdict.why}`);
          fstatus.textContent = "";
          return;
        }
        const text = asText(got.data);
        if (text === null) {
          closeEditor(`${path} is binary (${got.data.length} bytes): download it.`);
          fstatus.textContent = "";
          return;
        }
        show(path, text, got.version);
        fstatus.textContent = "";
      } catch (x) {
        fstatus.textContent = message(x);
      }
    };
    const mark = (ok: boolean, hexsum: string, why: string) => {
      verified.dataset.verified = String(ok);
      verified.dataset.sha256 = hexsum;
      verified.className = ok ? "fok" : "error";
      verified.textContent = ok ? "verified sha-256" : "NOT verified: " + why;
      verified.title = "sha-256 " + hexsum;
    };

    const save = async (ifVersion?: string) => {
      if (!open) return;
      const o = open;
      const text = o.view.state.doc.toString();
      saveB.disabled = true;
      fstatus.textContent = "saving…";
      try {
        const e = await (await files()).write(o.path, new TextEncoder().encode(text), { ifVersion: ifVersion ?? o.version });
        o.version = e.version;
        edBox.dataset.version = e.version;
        fstatus.textContent = "saved";
        dialog.close();
      } catch (x) {
        if (status(x) === 412) {
          fstatus.textContent = "changed by someone else";
          dialog.open(o.path, text, {
            reload: () => openFile(o.path),
            theirs: async () => {
              const got = await fetchFile(sid(), o.path);
              return { text: asText(got.data) ?? "(binary now)", version: got.version };
            },
            overwrite: (v) => save(v),
          });
        } else fstatus.textContent = "not saved: " + message(x);
      }
      saveB.disabled = !open;
    };
    saveB.addEventListener("click", () => save());

    dlB.addEventListener("click", async () => {
      const path = dlB.dataset.path;
      if (!path) return;
      fstatus.textContent = "downloading…";
      try {
        const got = await fetchFile(sid(), path);
        mark(got.verdict.ok, got.verdict.hex, got.verdict.why);
        if (!got.verdict.ok) {
          fstatus.textContent = "not saved: the bytes were not the announced ones";
          return;
        }
        const url = URL.createObjectURL(new Blob([got.data as Uint8Array<ArrayBuffer>], { type: "application/octet-stream" }));
        const a = h("a", { href: url, download: baseName(path) });
        a.hidden = true;
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 10000);
        fstatus.textContent = "";
      } catch (x) {
        fstatus.textContent = message(x);
      }
    });

    // -- uploads --
    const upload = async (list: FileList | File[]) => {
      const all = Array.from(list);
      for (const [i, f] of all.entries()) {
        const path = joinPath(dir, f.name);
        upStatus.textContent = `${i + 1}/${all.length} ${f.name}`;
        progress.hidden = false;
        progress.value = 0;
        try {
          // The digest needs the bytes in memory: past DIGEST_MAX the file
          // streams from disk and the server's own digest is what stands.
          const body: Blob | Uint8Array = f.size <= DIGEST_MAX ? new Uint8Array(await f.arrayBuffer()) : f;
          const digest = body instanceof Uint8Array ? "sha-256=:" + b64(await sha256(body)) + ":" : "";
          let code = await put(sid(), path, body, digest, true, (p) => (progress.value = p));
          if (code === 412 && confirm(`${path} exists. Replace it?`)) {
            code = await put(sid(), path, body, digest, false, (p) => (progress.value = p));
          }
          if (code === 412) upStatus.textContent = `${f.name}: kept the existing file`;
          else if (code < 200 || code > 299) throw new Error(`${f.name}: the upload failed (${code})`);
          else {
            upStatus.textContent = `uploaded ${path}`;
            upStatus.dataset.uploaded = path;
          }
        } catch (x) {
          upStatus.textContent = message(x);
        }
      }
      progress.hidden = true;
      reloadOpenDir();
    };
    const reloadOpenDir = () => {
      if (dir === root) return reloadTree();
      const li = tree.querySelector<HTMLElement>(`[data-path="${CSS.escape(dir)}"]`)?.parentElement;
      const kids = li?.querySelector("ul");
      if (kids) list(dir, kids as HTMLElement);
      else reloadTree();
    };
    pickB.addEventListener("click", () => picker.click());
    picker.addEventListener("change", () => {
      if (picker.files?.length) upload(picker.files).then(() => (picker.value = ""));
    });
    wrap.addEventListener("dragover", (e) => {
      e.preventDefault();
      wrap.classList.add("drop");
    });
    wrap.addEventListener("dragleave", () => wrap.classList.remove("drop"));
    wrap.addEventListener("drop", (e) => {
      e.preventDefault();
      wrap.classList.remove("drop");
      if (e.dataTransfer?.files.length) upload(e.dataTransfer.files);
    });

    let listed = false;
    const follow = () => {
      if (ctx.sandbox().state === "running" && !listed) {
        listed = true;
        reloadTree();
      }
    };
    ctx.onChange(follow);
    follow();
    setDir(root);

    // The tree refreshes on its own: a recursive watch of the root, and a
    // folder shown (the root, or an open one) whose entries changed is
    // listed again, a moment after the last change; a dropped record (a
    // flood, or time away) lists every shown folder again.
    const watching = new AbortController();
    const dirty = new Set<string>();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const shown = (d: string): HTMLElement | null => {
      if (d === root) return tree;
      const b = tree.querySelector<HTMLElement>(`[data-path="${CSS.escape(d)}"]`);
      const kids = b?.parentElement?.querySelector<HTMLElement>(":scope > ul");
      return kids && !kids.hidden ? kids : null;
    };
    const flush = () => {
      timer = undefined;
      for (const d of dirty) {
        const into = shown(d);
        if (into) (into === tree ? reloadTree() : list(d, into));
      }
      dirty.clear();
    };
    const touched = (d: string) => {
      dirty.add(d);
      if (timer === undefined) timer = setTimeout(flush, 300);
    };
    (async () => {
      let after = 0;
      while (!watching.signal.aborted) {
        try {
          if (ctx.sandbox().state === "running") {
            for await (const ev of (await files()).watch(root, { recursive: true, after, signal: watching.signal })) {
              after = ev.seq;
              if (ev.type === "dropped") {
                touched(root);
                for (const b of tree.querySelectorAll<HTMLElement>(".fdir")) touched(b.dataset.path!);
              } else if (ev.type !== "write" && ev.path) {
                touched(parentOf(ev.path));
              }
            }
          }
        } catch {
          if (watching.signal.aborted) return;
        }
        await new Promise((r) => setTimeout(r, 2000));
      }
    })();

    return {
      close: () => {
        watching.abort();
        clearTimeout(timer);
        open?.view.destroy();
        dialog.close();
      },
    };
  },
};
export default tab;

// -- helpers --

/** fetchFile reads a file whole with its version and the verdict on its bytes. */
async function fetchFile(id: string, path: string) {
  const resp = await sdk().send({ method: "GET", path: `/v1/sandboxes/${encodeURIComponent(id)}/files/content`, params: { path } });
  const data = new Uint8Array(await resp.arrayBuffer());
  const verdict = await verify(data, resp.headers.get("Repr-Digest"));
  const version = (resp.headers.get("ETag") ?? "").trim().replace(/^W\//, "").replace(/^"|"$/g, "");
  return { data, verdict, version };
}

/** put sends a file with its digest, reporting upload progress (0..1);
 * it answers the HTTP status. */
function put(id: string, path: string, body: Blob | Uint8Array, digest: string, onlyNew: boolean, progress: (p: number) => void): Promise<number> {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open("PUT", `/v1/sandboxes/${encodeURIComponent(id)}/files/content?path=${encodeURIComponent(path)}`);
    x.setRequestHeader("Authorization", "Bearer " + (key() ?? ""));
    x.setRequestHeader("Content-Type", "application/octet-stream");
    if (digest) x.setRequestHeader("Repr-Digest", digest);
    if (onlyNew) x.setRequestHeader("If-None-Match", "*");
    x.upload.onprogress = (e) => {
      if (e.lengthComputable && e.total) progress(e.loaded / e.total);
    };
    x.onload = () => {
      progress(1);
      resolve(x.status);
    };
    x.onerror = () => reject(new Error("the upload broke off"));
    x.send(body instanceof Blob ? body : (body as Uint8Array<ArrayBuffer>));
  });
}

/** asText is the bytes as UTF-8 text, or null for binary. */
function asText(b: Uint8Array): string | null {
  if (b.includes(0)) return null;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(b);
  } catch {
    return null;
  }
}

function parentOf(p: string): string {
  const i = p.lastIndexOf("/");
  return i <= 0 ? "/" : p.slice(0, i);
}

function baseName(p: string): string {
  return p.slice(p.lastIndexOf("/") + 1) || "download";
}

function joinPath(d: string, name: string): string {
  return (d.endsWith("/") ? d : d + "/") + name.replace(/\//g, "_");
}

interface ConflictActions {
  reload(): void;
  theirs(): Promise<{ text: string; version: string }>;
  overwrite(version: string): void;
}

/** conflictDialog: the save found the file changed since it was read. */
function conflictDialog() {
  const el = h("dialog", { id: "conflict", class: "fconflict", "aria-labelledby": "conflict-title" });
  const title = h("h2", { id: "conflict-title" }, "Changed by someone else");
  const text = h("p", { id: "conflict-text" });
  const reloadB = h("button", { id: "conflict-reload" }, "Reload theirs (drop my edits)");
  const diffB = h("button", { id: "conflict-diff" }, "Show the difference");
  const overB = h("button", { id: "conflict-overwrite", class: "danger" }, "Overwrite with mine");
  const cancelB = h("button", { id: "conflict-cancel" }, "Keep editing");
  const merge = h("div", { id: "conflict-merge", class: "fmerge" });
  const legend = h("p", { class: "muted", id: "conflict-legend" });
  const err = h("p", { class: "error", role: "alert" });
  el.append(title, text, h("div", { class: "fbtns" }, reloadB, diffB, overB, cancelB), legend, merge, err);
  let mv: MergeView | null = null;
  let acts: ConflictActions | null = null;
  let mine = "";
  let theirVersion = "";
  const close = () => {
    mv?.destroy();
    mv = null;
    shadow(merge).box.replaceChildren();
    delete merge.dataset.shown;
    legend.textContent = "";
    if (el.open) el.close();
  };
  el.addEventListener("close", () => {
    mv?.destroy();
    mv = null;
    shadow(merge).box.replaceChildren();
    delete merge.dataset.shown;
  });
  reloadB.addEventListener("click", () => {
    const a = acts;
    close();
    a?.reload();
  });
  cancelB.addEventListener("click", close);
  diffB.addEventListener("click", async () => {
    if (!acts) return;
    try {
      const t = await acts.theirs();
      theirVersion = t.version;
      mv?.destroy();
      const { root, box } = shadow(merge);
      box.replaceChildren();
      const ro = [look, EditorView.editable.of(false), EditorState.readOnly.of(true), EditorView.lineWrapping];
      mv = new MergeView({ root, parent: box, a: { doc: t.text, extensions: ro }, b: { doc: mine, extensions: ro } });
      merge.dataset.shown = "1";
      legend.textContent = "Left: theirs (now in the sandbox). Right: yours (not saved).";
    } catch (x) {
      err.textContent = message(x);
    }
  });
  overB.addEventListener("click", async () => {
    if (!acts) return;
    try {
      // On purpose: over the version there is now, and only that one.
      const v = theirVersion || (await acts.theirs()).version;
      acts.overwrite(v);
    } catch (x) {
      err.textContent = message(x);
    }
  });
  return {
    el,
    close,
    open(path: string, yours: string, a: ConflictActions) {
      close();
      acts = a;
      mine = yours;
      theirVersion = "";
      err.textContent = "";
      text.textContent = `${path} changed in the sandbox since you opened it. Your edits are not saved.`;
      el.showModal();
    },
  };
}
