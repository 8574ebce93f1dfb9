/**
 * A minimal Koa app behind webhook-inbox. Run: `npx tsx examples/koa.ts`, then
 *   curl -X POST localhost:3000/webhooks -H 'Idempotency-Key: evt_1' \
 *     -H 'content-type: application/json' -d '{"amount": 5}'
 */
import Koa from 'koa';
import { inbox } from 'webhook-inbox/koa';

const app = new Koa();
// Before any body parser: it reads the raw bytes itself. With @koa/router instead:
//   router.post('/webhooks', inbox({ db, handle }))
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
app.listen(Number(process.env.PORT ?? 3000), () => console.log('listening'));
