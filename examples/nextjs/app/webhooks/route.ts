/**
 * A Next.js App Router route handler (`app/webhooks/route.ts`): plain `Request` in, `Response`
 * out. POST /webhooks is a delivery; GET /webhooks/health would need its own route file
 * (`app/webhooks/health/route.ts` exporting the same `GET`).
 *
 * Next.js must not cache or pre-render it, and the inbox needs Node (pg, PGlite): hence the
 * two segment options below.
 */
// In your app: from 'webhook-inbox/fetch'.
import { handler } from '../../../../adapters/fetch.js';
import { inbox } from '../../lib/inbox.js';

export const runtime = 'nodejs';
export const dynamic = 'force-dynamic';

const webhooks = handler(inbox);
export const POST = webhooks;
export const GET = webhooks;
