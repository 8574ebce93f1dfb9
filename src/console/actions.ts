/** The console's POST actions: each asks first (the same form with `confirmed=yes`), then runs and logs who did it. */
import { OperationError } from '../errors.js';
import type { ReplayResult } from '../operations/index.js';
import type { ConsoleBackend, EventRef } from './backend.js';
import { type DeadLetterFilterInput, parseDeadLetterFilter } from './filters.js';
import { FormError } from './form-error.js';
import { href } from './html.js';
import type { PageContext } from './layout.js';
import type { ResolvedConsoleOptions } from './options.js';
import { confirmPage, resultPage, seqRange } from './pages.js';
import type { Principal } from './security.js';

/** The most events one console action on selected rows handles (a filter's replay has no bound). */
const MAX_TARGETS = 1000;
const SAMPLE = 50;

export const ACTIONS = ['replay', 'replay-all', 'skip', 'unblock', 'skip-key'] as const;
export type ActionName = (typeof ACTIONS)[number];

function targetsOf(form: URLSearchParams): EventRef[] {
  const values = form.getAll('target');
  if (values.length === 0) throw new FormError('select at least one dead letter (field `target`)');
  if (values.length > MAX_TARGETS)
    throw new FormError(`at most ${MAX_TARGETS} dead letters at once (field \`target\`)`);
  return values.map((value) => {
    const slash = value.indexOf('/');
    let ref: EventRef | undefined;
    try {
      if (slash > 0)
        ref = {
          source: decodeURIComponent(value.slice(0, slash)),
          id: decodeURIComponent(value.slice(slash + 1)),
        };
    } catch {}
    if (!ref || ref.id === '')
      throw new FormError('field `target` must be `<source>/<id>`, each URI-encoded');
    return ref;
  });
}

function keyOf(form: URLSearchParams): { source: string; key: string } {
  const source = form.get('source');
  const key = form.get('key');
  if (!source) throw new FormError('field `source` is required');
  if (!key) throw new FormError('field `key` is required');
  return { source, key };
}

function outcomeOf(err: unknown): string {
  if (err instanceof OperationError) return `${err.code}: ${err.message}`;
  throw err;
}

function replayOutcome(r: ReplayResult): string {
  return r.status && r.outcome === 'requeued' ? `requeued (now ${r.status})` : r.outcome;
}

export async function runAction(
  name: ActionName,
  form: URLSearchParams,
  ctx: PageContext,
  principal: Principal,
  backend: ConsoleBackend,
  options: ResolvedConsoleOptions,
): Promise<string> {
  const confirmed = form.get('confirmed') === 'yes';
  const log = (details: object) =>
    options.logger.info(
      { console: name, who: principal.name, ...details },
      `webhook-inbox console: ${name} by ${principal.name}`,
    );
  const replayed = (results: ReplayResult[], what: object) => {
    log({ ...what, outcomes: results.map((r) => ({ id: r.id, outcome: r.outcome, status: r.status })) });
    return resultPage(
      ctx,
      'Replayed',
      results.map((r) => ({
        item: `${r.source ?? '?'}/${r.id}`,
        outcome: replayOutcome(r),
        link: eventLink(r),
      })),
    );
  };
  const eventLink = (r: { source: string | null; id: string }) =>
    r.source === null ? undefined : href(ctx.base, 'events', r.source, r.id);
  const applies = ctx.appliesHere
    ? 'The handler applies them now.'
    : "The application's sweeper applies them.";

  switch (name) {
    case 'replay':
    case 'skip': {
      const targets = targetsOf(form);
      const items = targets.map((t) => `${t.source}/${t.id}`);
      if (!confirmed) {
        const what = `${targets.length} dead letter${targets.length === 1 ? '' : 's'}`;
        return confirmPage(
          ctx,
          name,
          name === 'replay'
            ? `Replay ${what}? ${applies}`
            : `Skip ${what}? Each key moves past the seq for good; the dead letter stays as the record.`,
          items,
          form.getAll('target').map((t) => ['target', t]),
        );
      }
      if (name === 'replay') return replayed(await backend.replay(targets), { targets: items });
      const rows: Array<{ item: string; outcome: string; link?: string }> = [];
      for (const t of targets) {
        let outcome: string;
        try {
          const r = await backend.skip(t);
          outcome = `skipped seq ${seqRange(r)} of ${r.key}; it waits for ${r.nextSeq}`;
        } catch (err) {
          outcome = outcomeOf(err);
        }
        rows.push({ item: `${t.source}/${t.id}`, outcome, link: eventLink(t) });
      }
      log({ targets: items, outcomes: rows.map((r) => r.outcome) });
      return resultPage(ctx, 'Skipped', rows);
    }
    case 'replay-all': {
      // Times are absolute by now: what is confirmed is what is replayed, and a resubmit finishes the job.
      const filter: DeadLetterFilterInput = parseDeadLetterFilter(form);
      const ops = await backend.ops();
      const fields = Object.entries(filter.query).filter(([, v]) => v !== undefined) as Array<
        [string, string]
      >;
      if (!confirmed) {
        const count = await ops.countDead(filter.filter);
        const sample = await ops.deadLetters({ ...filter.filter, order: 'key', limit: SAMPLE });
        const wouldBe = await ops.replay(
          sample.map((d) => ({ id: d.id, source: d.source })),
          { dryRun: true },
        );
        return confirmPage(
          ctx,
          name,
          `Replay the ${count} dead letter${count === 1 ? '' : 's'} matching this filter, in key order${count > wouldBe.length ? ` (the first ${wouldBe.length} below)` : ''}? ${applies}`,
          wouldBe.map(
            (r) => `${r.source}/${r.id}: ${r.outcome === 'requeued' ? 'would be re-queued' : r.outcome}`,
          ),
          fields,
        );
      }
      const results: ReplayResult[] = [];
      for await (const batch of ops.deadBatches(filter.filter)) {
        results.push(...(await backend.replay(batch)));
      }
      return replayed(results, { filter: filter.query });
    }
    case 'unblock':
    case 'skip-key': {
      const { source, key } = keyOf(form);
      if (!confirmed) {
        const question =
          name === 'unblock'
            ? `Unblock key ${key}? Its cursor stays where it is; what waits at it is applied.`
            : `Skip what blocks key ${key}? The blocked seqs become a gap for good; what is held behind them drains.`;
        return confirmPage(
          ctx,
          name,
          question,
          [`${source}/${key}`],
          [
            ['source', source],
            ['key', key],
          ],
        );
      }
      let outcome: string;
      try {
        if (name === 'unblock') {
          const k = await backend.unblock(key, source);
          outcome = `unblocked; ${k.state}, waits for seq ${k.nextSeq}`;
        } else {
          const r = await backend.skip({ key, source });
          outcome = `skipped seq ${seqRange(r)}; it waits for ${r.nextSeq}`;
        }
      } catch (err) {
        outcome = outcomeOf(err);
      }
      log({ source, key, outcome });
      return resultPage(ctx, name === 'unblock' ? 'Unblocked' : 'Skipped', [
        { item: `${source}/${key}`, outcome, link: href(ctx.base, 'keys', source, key) },
      ]);
    }
  }
}
