/**
 * A minimal Express app behind webhook-inbox. Run: `npx tsx examples/express.ts`, then
 *   curl -X POST localhost:3000/webhooks -H 'Idempotency-Key: evt_1' \
 *     -H 'content-type: application/json' -d '{"amount": 5}'
 */
import express from 'express';
import { inbox } from 'webhook-inbox/express';

const app = express();
// Mount it before any body parser: it reads the raw bytes itself.
app.use(
  '/webhooks',
  inbox({
    db: process.env.DATABASE_URL, // required with NODE_ENV=production; unset elsewhere: in memory, with a warning
    async handle(event, { tx }) {
      // Write the side effect through `tx`: it commits together with the dedup record.
      await tx.selectNoFrom((eb) => eb.val(event.id).as('id')).execute();
      return { received: event.id }; // stored, and replayed to duplicates
    },
  }),
);
app.use(express.json()); // the rest of the app may parse JSON as usual
app.listen(Number(process.env.PORT ?? 3000), () => console.log('listening'));
