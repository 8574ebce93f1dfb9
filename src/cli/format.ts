/**
 * How results look: aligned tables and labelled lines for people, plain objects for --json.
 * Every value that came from a sender or a handler passes through `safeField` / `safeBlock`.
 */
import { formatDuration } from '../duration.js';
import type { DeadLetter, KeySummary, SkipResult } from '../operations/index.js';
import { safeBlock, safeField } from './terminal-safe.js';

/** Columns padded to their widest cell; null and undefined show as '-'. */
export function table(headers: string[], rows: unknown[][]): string {
  if (rows.length === 0) return '(none)';
  const cells = [
    headers,
    ...rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : safeField(String(c))))),
  ];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => r[i].length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** `label:` padded, then the value on one line (escaped), '-' when missing. */
export function line(label: string, value: unknown): string {
  return `${`${label}:`.padEnd(14)}${value === null || value === undefined ? '-' : safeField(String(value))}`;
}

/** `3` or `3-5`. */
export function seqRange(from: number, to: number): string {
  return from === to ? String(from) : `${from}-${to}`;
}

/** Shortened to one line of at most `max` characters, for a table cell. */
export function oneLine(text: string | null, max = 60): string | null {
  if (text === null) return null;
  const flat = safeField(text.replace(/\s+/g, ' '));
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** JSON for scripts: without the payload, for lists. */
export function deadLetterSummary(d: DeadLetter) {
  const { payload: _payload, ...rest } = d;
  return rest;
}

/** JSON for scripts: the payload as text when it is UTF-8, else base64. */
export function deadLetterJson(d: DeadLetter) {
  let payload: string | null = null;
  let payloadEncoding: 'utf8' | 'base64' | null = null;
  if (d.payload) {
    try {
      payload = new TextDecoder('utf-8', { fatal: true }).decode(d.payload);
      payloadEncoding = 'utf8';
    } catch {
      payload = d.payload.toString('base64');
      payloadEncoding = 'base64';
    }
  }
  return { ...deadLetterSummary(d), payload, payloadEncoding };
}

/** `dead show` for people: every field escaped; the payload keeps its lines. */
export function deadLetterText(d: DeadLetter): string {
  const { payload, payloadEncoding } = deadLetterJson(d);
  const headers = Object.entries(d.headers ?? {}).map(
    ([name, value]) => `  ${safeField(name)}: ${safeField(value)}`,
  );
  return [
    line('id', d.id),
    line('source', d.source),
    line('status', `${d.status}${d.deadReason ? ` (${d.deadReason})` : ''}`),
    line('type', d.type),
    line('key / seq', `${d.key ?? '-'} / ${d.seq ?? '-'}`) +
      (d.blocking ? '   (its key is blocked at this seq)' : ''),
    line('attempts', d.attempts),
    line('received', `${d.receivedAt.toISOString()} (${formatDuration(d.ageMs)} ago)`),
    ...(d.retryAt ? [line('retry_at', d.retryAt.toISOString())] : []),
    line('last error', d.lastError),
    line('cause', d.cause && `${d.cause} (failed ${d.failedAt?.toISOString() ?? '-'})`),
    ...(headers.length ? ['headers:', ...headers] : [line('headers', null)]),
    `payload (${payloadEncoding ?? 'none'}${payloadEncoding === 'utf8' ? '; control characters escaped, --raw for the bytes' : ''}):`,
    payload === null ? '-' : safeBlock(payload),
  ].join('\n');
}

export const KEY_HEADERS = ['SOURCE', 'KEY', 'STATE', 'NEXT SEQ', 'HELD', 'FIRST HELD', 'OLDEST HELD'];

export function keyRows(keys: KeySummary[]): unknown[][] {
  return keys.map((k) => [
    k.source,
    k.key,
    k.state === 'blocked' ? `blocked at ${k.blockedSeq} (${k.blockedReason})` : 'open',
    k.nextSeq,
    k.heldCount,
    k.firstHeldSeq,
    formatDuration(k.oldestHeldAgeMs),
  ]);
}

/** What `dead skip` and `keys skip` say. */
export function skipText(r: SkipResult): string {
  return safeField(
    `skipped seq ${seqRange(r.fromSeq, r.toSeq)} of key ${r.key} (${r.source}); it now waits for seq ${r.nextSeq}`,
  );
}
