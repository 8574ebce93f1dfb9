/** Scrubbing: removing secret headers from rows stored before they were declared secret. */
import { sql } from 'kysely';
import { secretHeaderSet } from '../delivery/payload.js';
import { batchSizeOf, batchTaking, type OperationsContext, sourceIs, table } from './context.js';

export interface ScrubOptions {
  /** Count the rows that hold one; change nothing. @defaultValue false */
  dryRun?: boolean;
  /** Rows changed per statement. @defaultValue 1000 */
  batchSize?: number;
}

export interface ScrubResult {
  readonly scrubbed: number;
  readonly dryRun: boolean;
  /** Rows a delivery or a drain held while the scrub ran: run it again. */
  readonly remaining: number;
  readonly headers: readonly string[];
}

/** Only the `headers` column changes: a waiting event is applied as before, without them. */
export async function scrubHeaders(ctx: OperationsContext, options: ScrubOptions = {}): Promise<ScrubResult> {
  const names = [...(ctx.secretHeaders ?? secretHeaderSet())].sort();
  const batch = batchSizeOf(options.batchSize, 1000);
  const events = table(ctx, 'events');
  const holding = sql`e.headers ?| ${names}::text[] and ${sourceIs('e.source', ctx.source)}`;
  const count = async () =>
    Number(
      (await sql<any>`select count(*) as n from ${events} e where ${holding}`.execute(ctx.db)).rows[0].n,
    );
  if (options.dryRun) return { scrubbed: await count(), remaining: 0, dryRun: true, headers: names };
  let scrubbed = 0;
  for (;;) {
    const { lock, recheck } = await batchTaking(ctx, holding);
    const result = await sql`
      update ${events} e set headers = e.headers - ${names}::text[]
       where (e.source, e.stream, e.id) in (
         select e.source, e.stream, e.id from ${events} e where ${holding} limit ${batch} ${lock}) ${recheck}`.execute(
      ctx.db,
    );
    const n = Number(result.numAffectedRows ?? 0n);
    scrubbed += n;
    if (n === 0) break;
  }
  return { scrubbed, remaining: await count(), dryRun: false, headers: names };
}
