/** Markup that is already safe: produced by `html`, never from a string given at run time. */
export class Html {
  constructor(readonly markup: string) {}
  toString(): string {
    return this.markup;
  }
}

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
  '`': '&#96;',
};

/** Text made safe for an element's content and a quoted attribute's value. */
export function escapeHtml(value: unknown): string {
  return String(value).replace(/[&<>"'`]/g, (c) => ESCAPES[c]!);
}

function render(value: unknown): string {
  if (value instanceof Html) return value.markup;
  if (value === null || value === undefined || value === false) return '';
  if (Array.isArray(value)) return value.map(render).join('');
  return escapeHtml(value);
}

/**
 * A template of markup: interpolated values are escaped, `Html` kept, arrays joined, and
 * `null`/`undefined`/`false` render nothing.
 *
 * ```ts
 * html`<td>${event.key}</td>`; // a key `<b>` renders as the text <b>
 * ```
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1]!;
  return new Html(out);
}

/** A URL below the mount point, each segment encoded. */
export function href(base: string, ...segments: string[]): string {
  return `${base}/${segments.map(encodeURIComponent).join('/')}`;
}

/** `?reason=poison&key=a%20b` from the values given, or ''. */
export function query(values: Record<string, string | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(values)) if (value) params.set(name, value);
  const text = params.toString();
  return text ? `?${text}` : '';
}
