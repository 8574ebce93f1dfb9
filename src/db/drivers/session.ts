/** What we keep per database session, on the object that outlives our connections (pg's client, PGlite). */
const sessions = new WeakMap<object, Session>();

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
  readonly turns = new SessionTurns();
}

/** The turns of one PGlite session: per instance, as inboxes sharing one PGlite share its session. */
export class SessionTurns {
  tail: Promise<void> = Promise.resolve();
  release: (() => void) | undefined;
  /** A turn began in this pass of the event loop; cleared by the next check phase. */
  #passTaken = false;

  /** Waits for a loop pass the session has not run in: PGlite does no I/O, and turns would starve sockets. */
  async ownPass(): Promise<void> {
    if (this.#passTaken) await new Promise<void>((resolve) => setImmediate(resolve));
    this.#passTaken = true;
    setImmediate(() => {
      this.#passTaken = false;
    });
  }
}
