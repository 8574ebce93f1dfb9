/**
 * A NestJS app (Nest on Express) behind webhook-inbox. Nest parses JSON bodies before any
 * middleware runs; with `rawBody: true` it also keeps the exact bytes in `req.rawBody`, and the
 * Express adapter takes those (the bytes are what signatures and the body hash are computed
 * over). Without `rawBody: true`, a JSON delivery is refused with a clear 500 problem.
 *
 * Run: `npx tsx examples/nestjs/main.ts`, then
 *   curl -X POST localhost:3000/webhooks -H 'Idempotency-Key: evt_1' \
 *     -H 'content-type: application/json' -d '{"note": "paid"}'
 *
 * Decorators are applied as plain calls (`Module({...})(AppModule)`) so that this file needs no
 * `experimentalDecorators`; in your app, write `@Module({...})` as usual.
 */
import 'reflect-metadata';
import { type MiddlewareConsumer, Module, type NestModule, RequestMethod } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { sql } from 'kysely';
// In your app: from 'webhook-inbox/express' and 'webhook-inbox'.
import { type InboxMiddleware, inbox } from '../../adapters/express.js';
import type { Handler, InboxOptions } from '../../src/index.js';

/** What a sender posts: `{ "note": "…" }`. */
export interface NoteEvent {
  note: string;
}

/** Appends each event's note to `<appSchema>.notes`, through `tx`: it commits with the dedup record. */
export function noteHandler(appSchema: string): Handler<NoteEvent> {
  return async (event, { tx }) => {
    await sql`insert into ${sql.table(`${appSchema}.notes`)} (event_id, key, seq, note)
              values (${event.id}, ${event.key}, ${event.seq}, ${event.body.note})`.execute(tx);
    return { noted: event.id };
  };
}

export interface NestWebhooksOptions {
  /** Inbox options; `handle` is the notes handler. */
  inbox?: Omit<InboxOptions, 'handle'>;
  /** Schema of the app's `notes` table. @defaultValue 'public' */
  appSchema?: string;
}

/** Builds the Nest app: POST /webhooks and GET /webhooks/health behind the inbox. */
export async function createNestApp(options: NestWebhooksOptions = {}) {
  const appSchema = options.appSchema ?? 'public';
  const webhooks: InboxMiddleware = inbox({ ...options.inbox, handle: noteHandler(appSchema) });
  const db = await webhooks.inbox.kysely();
  await sql`create schema if not exists ${sql.id(appSchema)}`.execute(db);
  await sql`create table if not exists ${sql.table(`${appSchema}.notes`)} (
    n serial primary key, event_id text not null, key text, seq int, note text not null)`.execute(db);

  class AppModule implements NestModule {
    configure(consumer: MiddlewareConsumer) {
      // Nest binds middleware to these routes: POST /webhooks is a delivery, GET
      // /webhooks/health the probe, other methods on /webhooks 405.
      consumer
        .apply(webhooks)
        .forRoutes(
          { path: 'webhooks', method: RequestMethod.ALL },
          { path: 'webhooks/health', method: RequestMethod.GET },
        );
    }
  }
  Module({})(AppModule);

  // rawBody: true keeps the exact bytes beside the parsed JSON: what the inbox needs.
  const app = await NestFactory.create<NestExpressApplication>(AppModule, { rawBody: true, logger: false });
  // Nest does not close middleware it did not create: the inbox closes with the app.
  const close = app.close.bind(app);
  app.close = async () => {
    await close();
    await webhooks.inbox.close();
  };
  return { app, inbox: webhooks.inbox };
}
