/** Tables and labelled lines for people; every value from a sender or a handler passes `safeField` / `safeBlock`. */
import { formatDuration } from '../duration.js';
import type { DeadLetter, KeySummary, SkipResult } from '../operations/index.js';
import { safeBlock, safeField } from './terminal-safe.js';

/** One column per header, each cell from its row, padded to the widest; null and undefined show as '-'. */
export function table<T>(rows: readonly T[], columns: Record<string, (row: T) => unknown>): string {
  if (rows.length === 0) return '(none)';
  const headers = Object.keys(columns);
  const cell = (c: unknown) => (c === null || c === undefined ? '-' : safeField(String(c)));
  const cells = [headers, ...rows.map((r) => Object.values(columns).map((column) => cell(column(r))))];
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

export function line(label: string, value: unknown): string {
  return `${`${label}:`.padEnd(14)}${value === null || value === undefined ? '-' : safeField(String(value))}`;
}

export function seqRange(from: number, to: number): string {
  return from === to ? String(from) : `${from}-${to}`;
}

export function oneLine(text: string | null, max = 60): string | null {
  if (text === null) return null;
  const flat = safeField(text.replace(/\s+/g, ' '));
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

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

export const KEY_COLUMNS: Record<string, (k: KeySummary) => unknown> = {
  SOURCE: (k) => k.source,
  KEY: (k) => k.key,
  STATE: (k) => (k.state === 'blocked' ? `blocked at ${k.blockedSeq} (${k.blockedReason})` : 'open'),
  'NEXT SEQ': (k) => k.nextSeq,
  HELD: (k) => k.heldCount,
  'FIRST HELD': (k) => k.firstHeldSeq,
  'OLDEST HELD': (k) => formatDuration(k.oldestHeldAgeMs),
};

export function skipText(r: SkipResult): string {
  return safeField(
    `skipped seq ${seqRange(r.fromSeq, r.toSeq)} of key ${r.key} (${r.source}); it now waits for seq ${r.nextSeq}`,
  );
}
