// Small DOM helpers. Nothing a sandbox produces is ever rendered as markup:
// h() turns strings into text nodes.

/** h makes an element; strings become text nodes, never markup. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | boolean | ((e: any) => void)> = {},
  ...kids: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (typeof v === "boolean") {
      if (v) el.setAttribute(k, "");
    } else el.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) el.append(k);
  return el;
}

export function debounce(f: () => void, ms: number): () => void {
  let t: number | undefined;
  return () => {
    clearTimeout(t);
    t = window.setTimeout(f, ms);
  };
}

export function money(v: number | null | undefined): string {
  return v == null ? "none" : "$" + v.toFixed(4);
}

/** message is what an error shows: the API's message, never a stack. */
export function message(x: unknown): string {
  return x instanceof Error ? x.message : String(x);
}
