/**
 * Handlers by event type (the `handlers` option): a handler per type the provider sends, a
 * one-level wildcard per family of types, and a fallback. Resolved once, at construction, into
 * one function of the type that the apply path calls for every event it applies: the handler
 * it finds runs exactly where `handle` would (in the claim's transaction); none found, the event
 * is recorded `ignored` (docs/routing.md).
 *
 * Why one level: `customer.*` matches `customer.created` but not
 * `customer.subscription.created`. A deeper match would make a handler written for a family of
 * flat events (a `customer` object) receive another object's events (a subscription) the day
 * the provider adds them; one level keeps what a handler receives to the types it was written
 * for, and makes "most specific wins" a lookup instead of a ranking: a type has at most one
 * wildcard that can match it, its own family's.
 */
import { InboxOptionsError } from '../errors.js';
import type { Handler } from './event.js';

/**
 * The types a provider sends, each with the body it sends for it: what types `handlers` per
 * event. Write one by hand, or build one from a union of event types that carry their `type`
 * (an SDK's, imported as a type only: the inbox depends on no provider's SDK) with
 * {@link EventMapOf}.
 *
 * ```ts
 * interface ShopMap { 'orders/create': Order; 'orders/paid': Order; 'refunds/create': Refund }
 * ```
 */
export type EventTypeMap = object;

/**
 * A type map from a union of events that name their own type, as Stripe's `Stripe.Event` does.
 *
 * ```ts
 * import type Stripe from 'stripe';
 * type StripeEventMap = EventMapOf<Stripe.Event>; // { 'invoice.paid': Stripe.InvoicePaidEvent, … }
 * ```
 */
export type EventMapOf<TEvents extends { readonly type: string }> = {
  [E in TEvents as E['type']]: E;
};

/**
 * The one-level wildcard of a type (`customer.*` of `customer.created`, `orders/*` of Shopify's
 * `orders/create`): its text up to its last `.` or `/`, then `*`; never for a type of one
 * segment. Read one character at a time, so that the last separator wins.
 */
export type WildcardOf<
  T extends string,
  Seen extends string = '',
  Cut extends string = never,
> = T extends `${infer C}${infer Rest}`
  ? WildcardOf<Rest, `${Seen}${C}`, C extends '.' | '/' ? (Rest extends '' ? Cut : `${Seen}${C}`) : Cut>
  : [Cut] extends [never]
    ? never
    : `${Cut}*`;

/** The patterns a map allows: each type, each type's wildcard, and `'*'`. */
export type HandlerPattern<TMap extends EventTypeMap> =
  | (keyof TMap & string)
  | WildcardOf<keyof TMap & string>
  | '*';

/** The types of the map that `pattern` can receive: itself, its family, or all of them for `'*'`. */
export type PatternTypes<TMap extends EventTypeMap, P extends string> = P extends '*'
  ? keyof TMap & string
  : { [K in keyof TMap & string]: K extends P ? K : P extends WildcardOf<K> ? K : never }[keyof TMap &
      string];

/**
 * The `handlers` option, typed by a map of event types to bodies: each handler's `event.body`
 * is the body of the types it can receive (a wildcard's and the fallback's, the union of their
 * types'). A pattern the map does not allow does not compile. Without a map, any pattern, and
 * bodies are `any`. `DB` types `tx`, as for `handle`.
 *
 * ```ts
 * createInbox({
 *   db,
 *   provider: stripe({ secret }),
 *   handlers: {
 *     'invoice.paid': async (event, { tx }) => { event.body.data.object.amount_paid },
 *     'customer.*': async (event) => { event.body.data.object },
 *   } satisfies Handlers<EventMapOf<Stripe.Event>, DB>,
 * });
 * ```
 */
export type Handlers<TMap extends EventTypeMap = Record<string, any>, DB = any> = string extends keyof TMap
  ? { readonly [pattern: string]: Handler<any, unknown, DB> | undefined }
  : {
      readonly [P in HandlerPattern<TMap>]?: Handler<TMap[PatternTypes<TMap, P> & keyof TMap], unknown, DB>;
    };

/** The handler for a type, or undefined: the event is then recorded `ignored`. */
export type HandlerFor = (type: string | null) => Handler | undefined;

/** `handle` as a router: every event, whatever its type, goes to it. */
export function handleEverything(handle: Handler): HandlerFor {
  return () => handle;
}

/**
 * Checks the `handlers` option and returns the router: an exact name first, then the type's
 * one-level wildcard, then `'*'`. Throws InboxOptionsError naming the pattern at fault.
 */
export function resolveHandlers(given: unknown): HandlerFor {
  if (given === null || typeof given !== 'object' || Array.isArray(given)) {
    throw new InboxOptionsError(
      'handlers',
      "must be an object of event types to handlers, e.g. { 'invoice.paid': fn }",
    );
  }
  const exact = new Map<string, Handler>();
  const families = new Map<string, Handler>();
  let fallback: Handler | undefined;
  const entries = Object.entries(given);
  if (entries.length === 0)
    throw new InboxOptionsError('handlers', "must name at least one event type, or '*'");
  for (const [pattern, handler] of entries) {
    const option = `handlers[${JSON.stringify(pattern)}]`;
    if (typeof handler !== 'function') throw new InboxOptionsError(option, 'must be a function');
    if (pattern === '*') {
      fallback = handler as Handler;
      continue;
    }
    const star = pattern.indexOf('*');
    if (star === -1 && pattern !== '') {
      exact.set(pattern, handler as Handler);
      continue;
    }
    const family = pattern.slice(0, -1);
    if (star !== pattern.length - 1 || !/^[^*]+[./]$/.test(family)) {
      throw new InboxOptionsError(
        option,
        "must be an event type ('invoice.paid'), a family of one level ('invoice.*', 'orders/*') or '*'",
      );
    }
    families.set(family, handler as Handler);
  }
  return (type) => {
    if (type === null) return fallback;
    const named = exact.get(type);
    if (named) return named;
    const cut = Math.max(type.lastIndexOf('.'), type.lastIndexOf('/'));
    if (cut > 0 && cut < type.length - 1) {
      const family = families.get(type.slice(0, cut + 1));
      if (family) return family;
    }
    return fallback;
  };
}
