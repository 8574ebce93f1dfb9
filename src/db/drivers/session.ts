/**
 * What we keep per database session: on the object that outlives our connection objects (pg's
 * pooled client, a PGlite instance), in one place: which folding statements are PREPAREd on it
 * (src/db/drivers/prepared-folds.ts), and PGlite's turns (src/db/drivers/pglite.ts).
 */

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
  /** The folding statements PREPAREd on this session, by name; undefined before its first fold. */
  prepared: Set<string> | undefined;
  /** PGlite's one session, handed out in turns (src/db/drivers/pglite.ts). */
  readonly turns = new SessionTurns();
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
