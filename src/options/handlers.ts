/**
 * Handlers by event type, resolved once into a router. Wildcards match one level (`customer.*`, not
 * `customer.subscription.created`), so a family's handler never gets another object's events.
 */
import { InboxOptionsError } from '../errors.js';
import type { Handler } from './event.js';

/** The types a provider sends, each with its body; write one, or build one with {@link EventMapOf}. */
export type EventTypeMap = object;

/**
 * A type map from a union of events that name their own type, as Stripe's `Stripe.Event` does:
 * `EventMapOf<Stripe.Event>` is `{ 'invoice.paid': Stripe.InvoicePaidEvent, … }`.
 */
export type EventMapOf<TEvents extends { readonly type: string }> = {
  [E in TEvents as E['type']]: E;
};

/** The one-level wildcard of a type (`customer.*` of `customer.created`); none for one segment. */
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
 * The `handlers` option, typed by a map of event types to bodies: each `event.body` is the body of the
 * types its pattern can receive, and a pattern the map does not allow does not compile.
 */
export type Handlers<TMap extends EventTypeMap = Record<string, any>, DB = any> = string extends keyof TMap
  ? { readonly [pattern: string]: Handler<any, unknown, DB> | undefined }
  : {
      readonly [P in HandlerPattern<TMap>]?: Handler<TMap[PatternTypes<TMap, P> & keyof TMap], unknown, DB>;
    };

/** The handler for a type, or undefined: the event is then recorded `ignored`. */
export type HandlerFor = (type: string | null) => Handler | undefined;

export function handleEverything(handle: Handler): HandlerFor {
  return () => handle;
}

/** Checks the `handlers` option and returns the router: an exact name, the type's family, then `'*'`. */
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
