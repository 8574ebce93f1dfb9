/**
 * What we keep per database session: on the object that outlives our connection objects (pg's
 * pooled client, a PGlite instance), in one place. Each driver module reads and writes its own
 * part: fold.ts which statements are PREPAREd for text folds, extended-protocol.ts which are
 * parsed and described for pipelines, pglite.ts the turns of PGlite's one session.
 */

/**
 * TEMPORARY (bench/wire-cost.ts): the transport to measure, `WEBHOOK_INBOX_WIRE`: `unnamed`
 * (pipelines parse every statement), `prepared` (text folds of PREPAREd statements, no
 * pipelines), `literals` (text folds with literals), `each` (no folds), `bare` (no folds, nothing named). Deleted with the modes.
 */
export const WIRE = process.env.WEBHOOK_INBOX_WIRE ?? '';

/** Per session handle: a pool hands out one client object per connection, for its life. */
const sessions = new WeakMap<object, Session>();

/** The session of a pg client or a PGlite instance (created on first use). */
export function sessionOf(handle: object): Session {
  let session = sessions.get(handle);
  if (!session) {
    session = new Session();
    sessions.set(handle, session);
  }
  return session;
}

export class Session {
  /**
   * Text folds (src/db/drivers/fold.ts): the folding statements PREPAREd on this session, or
   * 'inline' when its folds carry the statement's text; undefined before the first fold.
   */
  prepared: Set<string> | 'inline' | undefined;
  /** Pipelines (src/db/drivers/extended-protocol.ts): statement names parsed on this session (or sent to be, in a pipeline on the wire). */
  readonly parsed = new Set<string>();
  /**
   * Set once PostgreSQL said a statement of ours does not exist: from then on each statement is
   * parsed as the unnamed statement in every pipeline, which needs nothing to outlive it.
   */
  unnamed = WIRE === 'unnamed';
  /** Each described statement's columns; null for one that returns no rows. */
  readonly columns = new Map<string, Columns | null>();
  /** PGlite's one session, handed out in turns (src/db/drivers/pglite.ts). */
  readonly turns = new SessionTurns();
}

/** A statement's columns as the session's first run described them: names and parsers. */
export interface Columns {
  readonly names: readonly string[];
  readonly parsers: ReadonlyArray<(text: string) => unknown>;
}

/**
 * The turns of one PGlite session. Kept per PGlite instance, not per driver: two inboxes (or an
 * inbox and the app's own Kysely built with `inbox.kysely()`) sharing one PGlite share its one
 * session, so they must queue in one line.
 */
export class SessionTurns {
  tail: Promise<void> = Promise.resolve();
  release: (() => void) | undefined;
  /** A turn began in this pass of the event loop; cleared by the next check phase. */
  #passTaken = false;

  /**
   * Waits, if need be, for a pass of the event loop in which the session has not run yet: at
   * most one turn per pass. Called by the turn's holder, so the order of turns stays the chain's.
   *
   * Why: PGlite's calls resolve without waiting for I/O, so a chain of turns, or one socket's
   * request after another's in the same poll phase, ran back to back in microtasks and the event
   * loop did not come round until the whole queue was through. Under saturation one pass lasted
   * about as long as p50 (every waiting delivery's transaction), and Node (libuv 1.45 and later)
   * accepts one new connection per pass: of 50 connections opened at once, the last waited about
   * 50 passes to be accepted, seconds. In the benchmark nearly every delivery slower than p99 (on
   * inbox-pglite and bare-pglite alike) was a connection's first request; the others kept p99
   * near 2× p50. One turn per pass bounds a pass to one transaction: sockets are read and a
   * connection accepted between any two turns. The cost: a setImmediate per turn while turns
   * follow each other, nothing for a turn on an idle session.
   */
  async ownPass(): Promise<void> {
    if (this.#passTaken) await new Promise<void>((resolve) => setImmediate(resolve));
    this.#passTaken = true;
    setImmediate(() => {
      this.#passTaken = false;
    });
  }
}
