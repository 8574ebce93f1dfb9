/** Option `groups`: which tenant an event belongs to, and what each tenant may use of the workers. */
import { type FieldSource, type ResolvedSource, resolveSource } from '../delivery/field-source.js';
import { parseDuration } from '../duration.js';
import { InboxOptionsError } from '../errors.js';
import { describe } from './option-checks.js';

/** A limit for every group, with overrides for some (premium tenants get more). */
export type PerGroup<T> = T | { readonly default?: T; readonly groups: Readonly<Record<string, T>> };

export interface GroupsOption {
  /** The event's group, a field source as `fields` takes; absent: no group. @defaultValue the `provider`'s */
  readonly by?: FieldSource;
  /** Handlers of one group running at once, over every instance. @defaultValue no limit */
  readonly concurrency?: PerGroup<number>;
  /** Events a group may start per period, over every instance: `'5/s'`, `'100/m'`. @defaultValue no limit */
  readonly rate?: PerGroup<string>;
  /** Inline mode: one group's deliveries in flight on this instance; past it, 429 + Retry-After. @defaultValue no limit */
  readonly inFlight?: number;
}

export interface Rate {
  readonly count: number;
  readonly ms: number;
}

export interface ResolvedGroups {
  readonly by: ResolvedSource;
  readonly slots: number | null;
  /** `{ group: slots }` as JSON, for the take; null without overrides. */
  readonly slotMap: string | null;
  readonly rate: Rate | null;
  /** `{ group: [count, ms] }` as JSON. */
  readonly rateMap: string | null;
  readonly inFlight: number | null;
  readonly rateOf: (group: string) => Rate | null;
}

function slotsOf(value: unknown, name: string): number {
  if (!Number.isSafeInteger(value) || (value as number) < 1 || (value as number) > 10_000)
    throw new InboxOptionsError(name, `must be an integer from 1 to 10000; got ${describe(value)}`);
  return value as number;
}

function rateOf(value: unknown, name: string): Rate {
  const m = typeof value === 'string' ? /^\s*(\d+)\s*\/\s*(\S+)\s*$/.exec(value) : null;
  const count = m ? Number(m[1]) : 0;
  const ms = m ? parseDuration(/^\d/.test(m[2]) ? m[2] : `1${m[2]}`) : undefined;
  if (!m || count < 1 || ms === undefined || ms < count || ms > 86_400_000)
    throw new InboxOptionsError(
      name,
      `must be events per period, such as '5/s', '100/m' or '10/2s'; got ${describe(value)}`,
    );
  return { count, ms };
}

function perGroup<T, R>(
  value: PerGroup<T> | undefined,
  name: string,
  read: (v: unknown, name: string) => R,
): { fallback: R | null; map: Map<string, R> } {
  const map = new Map<string, R>();
  if (value === undefined) return { fallback: null, map };
  if (value === null || typeof value !== 'object') return { fallback: read(value, name), map };
  const o = value as { default?: unknown; groups?: unknown };
  if (o.groups === null || typeof o.groups !== 'object')
    throw new InboxOptionsError(`${name}.groups`, 'must be an object of group names to limits');
  for (const [group, v] of Object.entries(o.groups)) map.set(group, read(v, `${name}.groups.${group}`));
  return { fallback: o.default === undefined ? null : read(o.default, `${name}.default`), map };
}

export function resolveGroups(
  value: unknown,
  providerGroup: FieldSource | undefined,
): ResolvedGroups | undefined {
  if (value === undefined) return undefined;
  if (value === null || typeof value !== 'object')
    throw new InboxOptionsError(
      'groups',
      `must be { by, concurrency, rate, inFlight }; got ${describe(value)}`,
    );
  const g = value as GroupsOption;
  for (const name of Object.keys(g)) {
    if (!['by', 'concurrency', 'rate', 'inFlight'].includes(name))
      throw new InboxOptionsError(
        `groups.${name}`,
        'is not an option of groups (by, concurrency, rate, inFlight)',
      );
  }
  const by = g.by ?? providerGroup;
  if (by === undefined)
    throw new InboxOptionsError('groups.by', 'is required: the provider preset names no group');
  const slots = perGroup(g.concurrency, 'groups.concurrency', slotsOf);
  const rates = perGroup(g.rate, 'groups.rate', rateOf);
  const json = <R>(map: Map<string, R>, f: (r: R) => unknown) =>
    map.size === 0 ? null : JSON.stringify(Object.fromEntries([...map].map(([k, v]) => [k, f(v)])));
  return {
    by: resolveSource(by, 'groups.by'),
    slots: slots.fallback,
    slotMap: json(slots.map, (n) => n),
    rate: rates.fallback,
    rateMap: json(rates.map, (r) => [r.count, r.ms]),
    inFlight: g.inFlight === undefined ? null : slotsOf(g.inFlight, 'groups.inFlight'),
    rateOf: (group) => rates.map.get(group) ?? rates.fallback,
  };
}
