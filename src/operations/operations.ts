/** Handler-free operator actions; each locks the key row before the event row, as the claim does. */
import type { Kysely } from 'kysely';
import { type Database, type DatabaseInput, openDatabase } from '../db/database.js';
import type { StoredEvent } from '../db/sql/inspect.js';
import { createTables, type Tables } from '../db/sql/tables.js';
import { secretHeaderSet } from '../delivery/payload.js';
import { headerNames, IDENTIFIER } from '../options/option-checks.js';
import type { LockWaitOptions, OperationsContext } from './context.js';
import {
  type DeadLetter,
  type DeadLetterFilter,
  type DeadLetterGroup,
  deadGroups,
  deadLetter,
  deadLetters,
} from './dead-letters.js';
import { busiestGroups, type GroupSummary } from './groups.js';
import {
  type IgnoredEvent,
  type IgnoredFilter,
  type IgnoredReplayResult,
  type IgnoredType,
  ignoredEvents,
  ignoredTypes,
  replayIgnored,
} from './ignored.js';
import { type KeyDetail, type KeySummary, key, keys, type SkipResult, skip, unblock } from './keys.js';
import { type ReplayOptions, type ReplayResult, type ReplaySelection, replay, statuses } from './replay.js';
import {
  type PruneOptions,
  type PruneResult,
  type PurgeOptions,
  type PurgeResult,
  prune,
  purgeDead,
} from './retention.js';
import { type ScrubOptions, type ScrubResult, scrubHeaders } from './scrub.js';
import { type BatchRef, countDead, eachBatch, pinSelection, type Selection } from './selection.js';
import { type InboxStatus, status } from './status.js';

/** Operator actions on `source`, or on every source (an id or key in several is refused as ambiguous). */
export class Operations implements OperationsContext {
  constructor(
    readonly db: Kysely<any>,
    readonly tables: Tables,
    readonly source?: string,
    readonly lockTimeoutMs?: number,
    readonly secretHeaders: ReadonlySet<string> = secretHeaderSet(),
  ) {}

  /** Dead letters, oldest first, with whether each blocks its key. */
  deadLetters(filter: DeadLetterFilter = {}): Promise<DeadLetter[]> {
    return deadLetters(this, filter);
  }

  /** Dead letters grouped by cause (the failed runs' fingerprint) and reason, the largest group first. */
  deadGroups(selection: Selection = {}): Promise<DeadLetterGroup[]> {
    return deadGroups(this, selection);
  }

  /** The dead letters a selection matches, in key order, `size` at a time. */
  deadBatches(selection: Selection, size = 100): AsyncGenerator<BatchRef[]> {
    return eachBatch(this, pinSelection(selection), size);
  }

  countDead(selection: Selection = {}): Promise<number> {
    return countDead(this, pinSelection(selection));
  }

  /** Deletes the dead letters a selection matches, in batches; those blocking their key are left. */
  purgeDead(selection: Selection, options: PurgeOptions = {}): Promise<PurgeResult> {
    return purgeDead(this, selection, options);
  }

  /** One dead letter (any stored event) by id, with its payload. */
  deadLetter(id: string, source = this.source): Promise<DeadLetter> {
    return deadLetter(this, id, source);
  }

  /** Re-queues dead letters, attempts reset; one whose key moved past its seq is `behind-cursor`. */
  replay(selection: ReplaySelection, options: ReplayOptions = {}): Promise<ReplayResult[]> {
    return replay(this, selection, options);
  }

  /** Events no handler takes (recorded `ignored`), newest first, with their payloads. */
  ignored(filter: IgnoredFilter = {}): Promise<IgnoredEvent[]> {
    return ignoredEvents(this, filter);
  }

  /** The groups with the most events waiting (option `groups`), and what runs of each now. */
  groups(limit = 20, source = this.source): Promise<GroupSummary[]> {
    return busiestGroups(this, limit, source);
  }

  /** Ignored events counted by type, the most frequent first. */
  ignoredTypes(source = this.source): Promise<IgnoredType[]> {
    return ignoredTypes(this, source);
  }

  /** Re-queues the unordered ignored events of one type; ordered ones are counted and left. */
  replayIgnored(selection: {
    type: string;
    source?: string;
    dryRun?: boolean;
  }): Promise<IgnoredReplayResult> {
    return replayIgnored(this, selection);
  }

  /**
   * Moves a blocked key past what blocks it (an event id's seq, or a key's poison seq or missing range),
   * recorded as a gap `skip`. A key held past `lockTimeoutMs` is OperationError `locked`.
   */
  skip(
    target: { id: string; source?: string } | { key: string; source?: string },
    options: LockWaitOptions = {},
  ): Promise<SkipResult> {
    return skip(this, target, options);
  }

  /** Opens a blocked key without moving its cursor; if nothing waits there, the gap timeout decides again. */
  unblock(name: string, source = this.source, options: LockWaitOptions = {}): Promise<KeySummary> {
    return unblock(this, name, source, options);
  }

  /** The current status of events by id, in one source. */
  statuses(source: string, ids: readonly string[]): Promise<Map<string, StoredEvent['status']>> {
    return statuses(this, source, ids);
  }

  /** Keys that are blocked or hold events (or with `blocked: true`, only blocked ones), longest waiting first. */
  keys(filter: { source?: string; blocked?: boolean; limit?: number } = {}): Promise<KeySummary[]> {
    return keys(this, filter);
  }

  /** One key in full, or undefined when the key was never seen. */
  key(name: string, source = this.source): Promise<KeyDetail | undefined> {
    return key(this, name, source);
  }

  /** Deletes processed rows older than `olderThan`, in batches; a key's cursor stays its dedup record. */
  prune(options: PruneOptions): Promise<PruneResult> {
    return prune(this, options);
  }

  /** Removes the secret headers (built-in and `secretHeaders`) from the headers stored with events. */
  scrubHeaders(options: ScrubOptions = {}): Promise<ScrubResult> {
    return scrubHeaders(this, options);
  }

  /** Counts by status, blocked keys, the oldest waiting ages and dead letters by reason. */
  status(source = this.source): Promise<InboxStatus> {
    return status(this, source);
  }
}

export interface OpenOperationsOptions {
  /** A connection string, a `pg.Pool`, a Kysely instance or a PGlite instance (the CLI passes `DATABASE_URL`). */
  db?: DatabaseInput;
  /** Without `db`: the directory of an embedded PGlite database on disk (the inbox's `dataDir`). */
  dataDir?: string;
  /** @defaultValue 'webhook_inbox' */
  schema?: string;
  /** @defaultValue '' */
  tablePrefix?: string;
  /** Act on this source only. @defaultValue every source */
  source?: string;
  /** How long an action waits for a held key before it fails with OperationError `locked`. @defaultValue 5000 */
  lockTimeoutMs?: number;
  /** More headers that carry a secret (the inbox's `secretHeaders`), besides the built-in ones. @defaultValue [] */
  secretHeaders?: readonly string[];
}

/**
 * Operator actions without an inbox, for scripts and the CLI (`openOperations({ db })`); the
 * application's sweeper applies replays.
 */
export async function openOperations(
  options: OpenOperationsOptions,
): Promise<Operations & { readonly database: Database; close(): Promise<void> }> {
  const schema = options.schema ?? 'webhook_inbox';
  const prefix = options.tablePrefix ?? '';
  if (!IDENTIFIER.test(schema))
    throw new TypeError(
      `webhook-inbox: schema must be a lower-case SQL identifier; got ${JSON.stringify(schema)}`,
    );
  if (prefix !== '' && !IDENTIFIER.test(prefix)) {
    throw new TypeError(
      `webhook-inbox: tablePrefix must be empty or a lower-case SQL identifier; got ${JSON.stringify(prefix)}`,
    );
  }
  if (options.db === undefined && options.dataDir === undefined) {
    throw new TypeError('webhook-inbox: openOperations needs `db` or `dataDir`');
  }
  if (options.db !== undefined && options.dataDir !== undefined) {
    throw new TypeError('webhook-inbox: give openOperations `db` or `dataDir`, not both');
  }
  const secretHeaders = secretHeaderSet(headerNames(options.secretHeaders, 'secretHeaders'));
  const database = await openDatabase(options.db, { poolSize: 2, dataDir: options.dataDir });
  const ops = new Operations(
    database.kysely,
    createTables(schema, prefix),
    options.source,
    options.lockTimeoutMs,
    secretHeaders,
  );
  return Object.assign(ops, { database, close: () => database.destroy() });
}
