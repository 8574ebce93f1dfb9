// Senders and handlers wrote what the CLI prints: C0, DEL, C1 and invisible characters are shown escaped,
// so no escape sequence drives the operator's terminal (`dead show --raw` gives the bytes).

const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]/g;
/** The same, minus line feed and tab: for blocks of text such as a payload or a whole message. */
const UNSAFE_IN_BLOCK =
  /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]/g;
/** What JSON.stringify leaves raw although a terminal may act on it (it escapes C0 itself). */
const UNSAFE_IN_JSON = /[\u007f-\u009f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]/g;

const NAMED: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

function escapeOne(c: string): string {
  const code = c.charCodeAt(0);
  return (
    NAMED[c] ?? (code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u{${code.toString(16)}}`)
  );
}

/** One field on one line: every control character escaped, `\n` included. */
export function safeField(text: string): string {
  return text.replace(UNSAFE, escapeOne);
}

/** A block of text: escaped, but line feeds and tabs kept. */
export function safeBlock(text: string): string {
  return text.replace(UNSAFE_IN_BLOCK, escapeOne);
}

/** JSON safe on a terminal, parsing to the same value: DEL, C1 and invisible characters become `\uXXXX`. */
export function safeJson(value: unknown): string {
  return JSON.stringify(value).replace(
    UNSAFE_IN_JSON,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}
