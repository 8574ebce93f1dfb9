/**
 * What an inbox says as it starts (src/inbox/inbox.ts): a retention shorter than providers retry, and
 * the likely fix when the start failed.
 */
import { missingTables } from '../db/drivers/postgres-error.js';
import type { ResolvedOptions } from '../runtime/resolved-options.js';

const SHORT_RETENTION_MS = 3 * 86_400_000;
let warnedShortRetention = false;

/**
 * Processed rows are the dedup record of unordered events: pruned sooner than a sender retries,
 * a redelivery would be applied again. Said to the inbox's logger, and once per process as a
 * process warning.
 */
export function warnIfRetentionIsShort({ retention, logger, source }: ResolvedOptions): void {
  if (retention === false || retention >= SHORT_RETENTION_MS) return;
  const message =
    `webhook-inbox: retention is ${retention} ms, shorter than 3 days: senders that retry for longer ` +
    '(Stripe retries for 3 days) can redeliver an unordered event after its row was pruned, and it would be applied again';
  logger.warn({ retention, source }, message);
  if (!warnedShortRetention) {
    warnedShortRetention = true;
    process.emitWarning(message, 'WebhookInboxWarning');
  }
}

/** What to do about a start that failed, by what failed. */
export function startHint(err: unknown): string {
  const text = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  if (missingTables(err))
    return `${text} (the inbox's tables are missing: run \`webhook-inbox migrate\`, or leave \`migrate\` on)`;
  if (/ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT/.test(text))
    return `${text} (is the database running, and is \`db\` its address?)`;
  return text;
}
