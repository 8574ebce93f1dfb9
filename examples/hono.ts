/**
 * A minimal Hono app behind webhook-inbox, on Node with @hono/node-server. Run:
 * `npx tsx examples/hono.ts`, then
 *   curl -X POST localhost:3000/webhooks -H 'Idempotency-Key: evt_1' \
 *     -H 'content-type: application/json' -d '{"amount": 5}'
 * On Bun or Deno, export `app` (or pass `app.fetch` to Bun.serve / Deno.serve) instead.
 */
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { inbox } from 'webhook-inbox/hono';

const app = new Hono();
// Answers POST /webhooks and GET /webhooks/health, 405 for other methods there, and passes
// every other request on. Nothing before it may read the body (c.req.json() and validators).
app.use(
  inbox({
    path: '/webhooks',
    db: process.env.DATABASE_URL, // required with NODE_ENV=production; unset elsewhere: in memory, with a warning
    async handle(event, { tx }) {
      // Write the side effect through `tx`: it commits together with the dedup record.
      await tx.selectNoFrom((eb) => eb.val(event.id).as('id')).execute();
      return { received: event.id }; // stored, and replayed to duplicates
    },
  }),
);
app.get('/', (c) => c.text('the rest of the app'));
serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 3000) }, () => console.log('listening'));
