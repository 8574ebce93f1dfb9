/**
 * One inbox for every Shopify store an app is installed on (docs/groups.md): each store is a
 * group, so one store's bulk import does not hold back the others, and the workers call each
 * store's Admin API at most twice a second, two calls at a time, over every instance.
 */
import { createInbox, type InboxOptions, RetryLater } from 'webhook-inbox';
import { shopify } from 'webhook-inbox/providers';

/** Calls a store's Admin API about an order (what the handler does with an event). */
export type AdminApi = (shop: string, order: { id: number }) => Promise<Response>;

export function shopInbox(secret: string, admin: AdminApi, where: Pick<InboxOptions, 'db' | 'schema'>) {
  return createInbox({
    ...where,
    provider: shopify({ secret }),
    mode: 'deferred',
    // The preset groups by the X-Shopify-Shop-Domain header; the big store gets more.
    groups: { concurrency: { default: 2, groups: { 'big-store.myshopify.com': 4 } }, rate: '2/s' },
    async handle(event) {
      const shop = event.headers['x-shopify-shop-domain'];
      const res = await admin(shop, event.body as { id: number });
      if (res.status === 429) {
        // The store's API says wait: hold the whole store, not just this event; no attempt spent.
        const seconds = Number(res.headers.get('retry-after') ?? '2');
        throw new RetryLater({ afterMs: seconds * 1000 }, { group: true });
      }
      if (!res.ok) throw new Error(`Admin API answered ${res.status}`);
    },
  });
}
