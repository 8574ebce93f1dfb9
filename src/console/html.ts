/**
 * HTML built from templates whose every interpolation is escaped: a value from an event (a
 * payload, a header, a key, an error text) can only ever become text. Markup is written in the
 * template itself, or is an `Html` another template produced.
 */

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
 * A template of markup: interpolated strings, numbers and dates are escaped, `Html` values
 * (other templates) are kept, arrays are joined, `null`/`undefined`/`false` render nothing.
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

/** A URL below the console's mount point, each path segment encoded: `href(base, 'events', source, id)`. */
export function href(base: string, ...segments: string[]): string {
  return `${base}/${segments.map(encodeURIComponent).join('/')}`;
}

/** A query string from the defined values: `?reason=poison&key=a%20b`, or '' when none. */
export function query(values: Record<string, string | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(values)) if (value) params.set(name, value);
  const text = params.toString();
  return text ? `?${text}` : '';
}
