/**
 * The Stripe quick start, whole: payments recorded exactly once from Stripe's webhooks.
 * `DATABASE_URL=postgres://… STRIPE_WEBHOOK_SECRET=whsec_… npx tsx examples/stripe/server.ts`,
 * then `stripe listen --forward-to localhost:3000/webhooks` and `stripe trigger
 * payment_intent.succeeded` (examples/stripe/README.md). It imports what your app imports: copy
 * it into a project with `"type": "module"` that installed webhook-inbox, express and stripe.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import type Stripe from 'stripe';
import { createInbox, type DatabaseInput, type Handler, type Inbox, type Logger } from 'webhook-inbox';
import { inbox as mountInbox } from 'webhook-inbox/express';
import { stripe } from 'webhook-inbox/providers';

/** The application's own table, in the same database as the inbox: the README's quick start's. */
export interface DB {
  payments: { id: string; amount: number };
}

/**
 * Runs once per Stripe event, inside the transaction that records the event: the payment row
 * and the dedup record commit together, so a redelivery never inserts twice.
 */
export const handle: Handler<Stripe.Event, unknown, DB> = async (event, { tx }) => {
  const stripeEvent = event.body;
  if (stripeEvent.type !== 'payment_intent.succeeded') return { skipped: stripeEvent.type };
  const intent = stripeEvent.data.object; // a Stripe.PaymentIntent
  await tx.insertInto('payments').values({ id: intent.id, amount: intent.amount }).execute();
  return { payment: intent.id }; // stored, and replayed to Stripe's redeliveries
};

export interface StripeExample {
  readonly url: string;
  readonly inbox: Inbox;
  close(): Promise<void>;
}

export async function startStripeExample(options: {
  db: DatabaseInput | string | undefined;
  secret: string | undefined;
  port?: number;
  logger?: Partial<Logger> | false;
}): Promise<StripeExample> {
  const inbox = createInbox<DB, Stripe.Event>({
    db: options.db,
    provider: stripe({ secret: options.secret as string }), // unset: an error naming it
    logger: options.logger ?? console,
    handle,
  });
  // The table next to the inbox's, through the inbox's own Kysely instance (the README's
  // `create table payments (id text primary key, amount bigint not null)`).
  await (await inbox.kysely()).schema
    .createTable('payments')
    .ifNotExists()
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('amount', 'bigint', (c) => c.notNull())
    .execute();
  // Fails here, at boot, on a wrong DATABASE_URL or a failed migration.
  await inbox.ready();

  const app = express();
  app.use('/webhooks', mountInbox(inbox)); // before any body parser: the signature covers the raw bytes
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(options.port ?? 0, () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    inbox,
    async close() {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await inbox.close();
    },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const example = await startStripeExample({
    db: process.env.DATABASE_URL,
    secret: process.env.STRIPE_WEBHOOK_SECRET,
    port: Number(process.env.PORT ?? 3000),
  });
  console.log(`listening on ${example.url}/webhooks`);
  process.once('SIGTERM', () => example.close().then(() => process.exit(0)));
}
