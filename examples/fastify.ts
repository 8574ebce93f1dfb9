/**
 * A minimal Fastify app behind webhook-inbox. Run: `npx tsx examples/fastify.ts`, then
 *   curl -X POST localhost:3000/webhooks -H 'Idempotency-Key: evt_1' \
 *     -H 'content-type: application/json' -d '{"amount": 5}'
 */
import Fastify from 'fastify';
import { inbox } from 'webhook-inbox/fastify';

const app = Fastify();
// Its raw-body parser is scoped to the plugin: the app's own routes still parse JSON.
await app.register(inbox, {
  prefix: '/webhooks',
  db: process.env.DATABASE_URL, // required with NODE_ENV=production; unset elsewhere: in memory, with a warning
  async handle(event, { tx }) {
    // Write the side effect through `tx`: it commits together with the dedup record.
    await tx.selectNoFrom((eb) => eb.val(event.id).as('id')).execute();
    return { received: event.id }; // stored, and replayed to duplicates
  },
});
await app.listen({ port: Number(process.env.PORT ?? 3000) }); // app.close() also closes the inbox
console.log('listening');
