/**
 * The inbox of a Next.js app, made once per server process (a module is evaluated once).
 * Its handler appends each event's note to the app's `notes` table through `tx`, so the note
 * and the dedup record commit together.
 *
 * Environment: DATABASE_URL (unset: in memory, with a warning), INBOX_SCHEMA (the inbox's
 * tables, default `webhook_inbox`), APP_SCHEMA (the `notes` table, default `public`).
 */
import { sql } from 'kysely';
// In your app: from 'webhook-inbox'.
import { createInbox, type Handler } from '../../../src/index.js';

const appSchema = process.env.APP_SCHEMA ?? 'public';

/** What a sender posts: `{ "note": "…" }`. */
export interface NoteEvent {
  note: string;
}

export const applyEvent: Handler<NoteEvent> = async (event, { tx }) => {
  await sql`insert into ${sql.table(`${appSchema}.notes`)} (event_id, key, seq, note)
            values (${event.id}, ${event.key}, ${event.seq}, ${event.body.note})`.execute(tx);
  return { noted: event.id };
};

export const inbox = createInbox({
  db: process.env.DATABASE_URL,
  schema: process.env.INBOX_SCHEMA,
  handle: applyEvent,
});

/** Creates the app's `notes` table (a real app runs its own migrations). */
export async function createNotesTable(): Promise<void> {
  const db = await inbox.kysely();
  await sql`create schema if not exists ${sql.id(appSchema)}`.execute(db);
  await sql`create table if not exists ${sql.table(`${appSchema}.notes`)} (
    n serial primary key, event_id text not null, key text, seq int, note text not null)`.execute(db);
}

/** The notes in the order they were applied. */
export async function notes(): Promise<
  { event_id: string; key: string | null; seq: number | null; note: string }[]
> {
  const { rows } = await sql<{ event_id: string; key: string | null; seq: number | null; note: string }>`
    select event_id, key, seq, note from ${sql.table(`${appSchema}.notes`)} order by n`.execute(
    await inbox.kysely(),
  );
  return rows;
}
