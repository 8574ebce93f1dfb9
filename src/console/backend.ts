/** What the console does, over an inbox (actions drain at once) or operations (the sweeper applies replays). */
import { sql } from 'kysely';
import type { Inbox } from '../inbox/inbox.js';
import { eachSource } from '../operations/context.js';
import type { KeySummary, Operations, ReplayResult, SkipResult } from '../operations/index.js';
import type { ResolvedConsoleOptions } from './options.js';

export interface EventRef {
  readonly source: string;
  readonly id: string;
}

export interface ConsoleBackend {
  readonly appliesHere: boolean;
  ops(): Promise<Operations>;
  replay(targets: readonly EventRef[]): Promise<ReplayResult[]>;
  skip(target: EventRef | { key: string; source: string }): Promise<SkipResult>;
  unblock(key: string, source: string): Promise<KeySummary>;
  /** Events processed in each of the last 60 minutes, oldest first. */
  processedPerMinute(): Promise<number[]>;
}

async function perMinute(ops: Operations): Promise<number[]> {
  const counts = new Array<number>(60).fill(0);
  for (const source of await eachSource(ops, ops.source)) {
    const { rows } = await sql<{ ago: number; n: string }>`
      select floor(extract(epoch from now() - processed_at) / 60)::int as ago, count(*) as n
        from ${sql.raw(ops.tables.events)}
       where source = ${source} and status = 'processed' and processed_at >= now() - interval '60 minutes'
       group by 1`.execute(ops.db);
    for (const r of rows) if (r.ago >= 0 && r.ago < 60) counts[59 - r.ago] += Number(r.n);
  }
  return counts;
}

export function createBackend({ inbox, operations }: ResolvedConsoleOptions): ConsoleBackend {
  const actor: Inbox | Operations = inbox ?? operations!;
  const ops = inbox ? () => inbox.operations() : async () => operations!;
  return {
    appliesHere: inbox !== undefined,
    ops,
    // Each with its own source: a target of another source is never replayed in the inbox's own.
    replay: (targets) => actor.replay(targets.map((t) => ({ id: t.id, source: t.source }))),
    skip: (target) => actor.skip(target),
    unblock: (key, source) => actor.unblock(key, source),
    processedPerMinute: async () => perMinute(await ops()),
  };
}
