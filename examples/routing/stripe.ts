/**
 * Routing by event type, with Stripe (docs/routing.md shows this file): a handler per type the
 * integration needs, typed by Stripe's own event union, imported as a type only: nothing of
 * Stripe's SDK runs. Every other type Stripe sends is answered 200 and recorded `ignored`.
 */
import type Stripe from 'stripe';
import { stripe } from '../../src/delivery/providers.js';
import { createInbox, type DatabaseInput, type EventMapOf, type Handlers } from '../../src/index.js';

/** `{ 'invoice.paid': Stripe.InvoicePaidEvent, … }`, from the union Stripe's SDK declares. */
type StripeEventMap = EventMapOf<Stripe.Event>;

/** The application's own tables (as kysely-codegen would write them). */
interface DB {
  invoices: { id: string; customer: string; amount_paid: number };
  customers: { id: string; email: string | null; deleted: boolean };
}

export const stripeHandlers = {
  async 'invoice.paid'(event, { tx }) {
    const invoice = event.body.data.object; // Stripe.Invoice
    await tx
      .insertInto('invoices')
      .values({
        id: invoice.id ?? event.id,
        customer: String(invoice.customer),
        amount_paid: invoice.amount_paid,
      })
      .execute();
    return { invoice: invoice.id };
  },
  // customer.created, customer.updated, customer.deleted; not customer.subscription.* (one level).
  async 'customer.*'(event, { tx }) {
    const customer = event.body.data.object;
    const row = { email: customer.email ?? null, deleted: event.body.type === 'customer.deleted' };
    await tx
      .insertInto('customers')
      .values({ id: customer.id, ...row })
      .onConflict((c) => c.column('id').doUpdateSet(row))
      .execute();
  },
} satisfies Handlers<StripeEventMap, DB>;

export function stripeInbox(options: { db: DatabaseInput; secret: string }) {
  return createInbox<DB>({
    db: options.db,
    provider: stripe({ secret: options.secret }),
    handlers: stripeHandlers,
  });
}
