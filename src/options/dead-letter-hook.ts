/** `onDeadLetter`, told after the COMMIT on every path; never awaited, what it throws is logged. */
import type { Logger } from '../observability/logger.js';

/** The dead-lettered event, as the hook is told of it (never its body: fetch it by id if needed). */
export interface DeadLetterEvent {
  readonly source: string;
  readonly id: string;
  readonly key: string | null;
  readonly seq: number | null;
  /** `poison` (failed `maxAttempts` times), `rejected` (RejectEvent) or `late` (its seq was skipped). */
  readonly reason: 'poison' | 'rejected' | 'late';
  /** Handler runs counted, the last one included (0 for a late event, which never ran). */
  readonly attempts: number;
  readonly receivedAt: Date | null;
}

/** Why it died. */
export interface DeadLetterCause {
  /** The failed run's fingerprint, what `webhook-inbox dead groups` groups by; null for a late event. */
  readonly fingerprint: string | null;
  /** The error's `Name: message`, as stored in `last_error`; null for a late event. */
  readonly message: string | null;
  /** What the handler threw (undefined for a late event). */
  readonly error: unknown;
}

export type OnDeadLetter = (event: DeadLetterEvent, cause: DeadLetterCause) => void | Promise<void>;

export function notifyDeadLetter(
  hook: OnDeadLetter | undefined,
  logger: Logger,
  event: DeadLetterEvent,
  cause: DeadLetterCause,
): void {
  if (!hook) return;
  const logged = (err: unknown) =>
    logger.error(
      { err, id: event.id, source: event.source, reason: event.reason },
      'webhook-inbox: onDeadLetter threw',
    );
  try {
    Promise.resolve(hook(event, cause)).catch(logged);
  } catch (err) {
    logged(err);
  }
}
