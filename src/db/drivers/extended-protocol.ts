/**
 * Several statements in one round trip on node-postgres's extended protocol: a Bind and an
 * Execute for each, then one Sync (src/db/drivers/fold.ts sends BEGIN with the claim, and the row
 * with COMMIT, this way). PostgreSQL runs them in order, as the statements of one simple query,
 * and after an error skips the rest up to the Sync.
 *
 * Where the simple protocol's `begin; execute <prepared>(literals); …` made PostgreSQL parse
 * every statement's text and evaluate each literal as an expression (EXECUTE's parameters are
 * expressions), a Bind names a statement the session already parsed and carries its values as
 * they are: nothing to parse, no literal to write or escape, no size past which a value cannot
 * fold. Each statement is parsed once per session, under a name of its own (`Parse` inline in
 * the first pipeline that needs it; on a session that lost them, in every pipeline: see
 * `forgetParsed`), and described once: the rows of later runs are read with
 * the columns the first run's description gave, so PostgreSQL does not build that description
 * again for every delivery, nor node-postgres parse it.
 *
 * Only on node-postgres's own clients (`pg.Client`): this is a submittable query object
 * (node-postgres's documented extension point, as pg-cursor and pg-query-stream are), which a
 * pg-shaped wrapper cannot be trusted to pass through.
 */
import pg from 'pg';
import { type Session, sessionOf } from './session.js';

/** One statement of a pipeline: parsed once per session under `name`, then bound with `values`. */
export interface PipelineStep {
  readonly name: string;
  readonly text: string;
  readonly values: readonly unknown[];
}

/** What one statement answered: its rows, and its command tag's verb and count. */
export interface PipelineResult {
  rows: Record<string, unknown>[];
  command: string | undefined;
  rowCount: number | null;
}

/**
 * After PostgreSQL said a statement of ours does not exist on this session (DISCARD ALL or
 * DEALLOCATE ALL by someone else, or a pooler that hands each transaction another backend):
 * from then on its pipelines parse every statement anew, as the unnamed statement, so that
 * nothing depends on what the backend kept. Slower (PostgreSQL parses each statement at every
 * delivery), never wrong; the values are still bound. Named statements parsed again would be lost
 * again under such a pooler, and the next transaction's COMMIT could be the one to find out.
 */
export function forgetParsed(client: object): void {
  const session = sessionOf(client);
  session.unnamed = true;
  session.parsed.clear();
}

const { prepareValue } = (pg as unknown as { utils: { prepareValue(value: unknown): unknown } }).utils;
/** `INSERT 0 1`, `UPDATE 3`, `BEGIN`: the verb, then the count (INSERT's comes after an oid). */
const COMMAND_TAG = /^([A-Za-z]+)(?: (\d+))?(?: (\d+))?/;

/** Sends the steps in one round trip; each step's result, in order. */
export function runPipeline(
  client: pg.ClientBase,
  steps: readonly PipelineStep[],
): Promise<PipelineResult[]> {
  const on = sessionOf(client);
  return new Promise((resolve, reject) => {
    client.query(new Pipeline(client, on, steps, resolve, reject) as unknown as pg.QueryConfig);
  });
}

/** node-postgres's submittable: `submit` writes the messages, the `handle…` methods read the answer. */
class Pipeline {
  readonly #results: PipelineResult[];
  /** The step whose answer is being read. */
  #at = 0;
  /** Steps whose statement this pipeline parsed. */
  readonly #parsedHere: number[] = [];
  #settled = false;

  constructor(
    readonly client: pg.ClientBase,
    readonly session: Session,
    readonly steps: readonly PipelineStep[],
    readonly resolve: (results: PipelineResult[]) => void,
    readonly reject: (err: unknown) => void,
  ) {
    this.#results = steps.map(() => ({ rows: [], command: undefined, rowCount: null }));
  }

  submit(connection: PgConnectionMessages): Error | null {
    const { parsed, columns, unnamed } = this.session;
    // One write for all of them, as node-postgres does for its own extended queries.
    connection.stream.cork?.();
    try {
      for (let i = 0; i < this.steps.length; i++) {
        const step = this.steps[i] as PipelineStep;
        if (unnamed) connection.parse({ name: '', text: step.text, types: [] });
        else if (!parsed.has(step.name)) {
          // Closed first: closing a statement that does not exist is no error, and one that
          // does (a Parse whose pipeline failed after it, so it was not known to have run) would
          // make the Parse fail.
          connection.close({ type: 'S', name: step.name });
          connection.parse({ name: step.name, text: step.text, types: [] });
          parsed.add(step.name);
          this.#parsedHere.push(i);
        }
        connection.bind({
          statement: unnamed ? '' : step.name,
          values: step.values,
          valueMapper: prepareValue,
        });
        if (!columns.has(step.name)) connection.describe({ type: 'P', name: '' });
        connection.execute({});
      }
      connection.sync();
    } catch (err) {
      // A value that cannot be written (prepareValue threw): nothing sent matters, the Sync
      // below ends it, and the error is the caller's.
      connection.sync();
      this.#fail(err);
    } finally {
      connection.stream.uncork?.();
    }
    return null;
  }

  handleRowDescription(msg: { fields: Array<{ name: string; dataTypeID: number; format: string }> }): void {
    const step = this.steps[this.#at] as PipelineStep;
    this.session.columns.set(step.name, {
      names: msg.fields.map((f) => f.name),
      parsers: msg.fields.map((f) => this.client.getTypeParser(f.dataTypeID, f.format as 'text')),
    });
  }

  handleDataRow(msg: { fields: Array<string | null> }): void {
    const step = this.steps[this.#at] as PipelineStep;
    const columns = this.session.columns.get(step.name);
    if (!columns) return;
    const row: Record<string, unknown> = {};
    const { names, parsers } = columns;
    for (let i = 0; i < names.length; i++) {
      const raw = msg.fields[i];
      row[names[i] as string] =
        raw === null || raw === undefined ? null : (parsers[i] as (t: string) => unknown)(raw);
    }
    (this.#results[this.#at] as PipelineResult).rows.push(row);
  }

  handleCommandComplete(msg: { text: string }): void {
    const result = this.#results[this.#at] as PipelineResult;
    const tag = COMMAND_TAG.exec(msg.text);
    if (tag) {
      result.command = tag[1];
      const count = tag[3] ?? tag[2];
      result.rowCount = count === undefined ? null : Number(count);
    }
    // Columns still unknown: it was described here, and no row description came (NoData), a
    // statement without rows.
    const step = this.steps[this.#at] as PipelineStep;
    if (!this.session.columns.has(step.name)) this.session.columns.set(step.name, null);
    this.#at++;
  }

  handleEmptyQuery(): void {
    this.#at++;
  }

  /** A server error (the rest up to the Sync is skipped) or the connection's end. */
  handleError(err: unknown): void {
    this.#fail(err);
  }

  handleReadyForQuery(): void {
    if (this.#settled) return;
    this.#settled = true;
    this.resolve(this.#results);
  }

  // Never asked of our statements; answered so that the connection is never left waiting.
  handlePortalSuspended(): void {}
  handleCopyInResponse(connection: { sendCopyFail(message: string): void }): void {
    connection.sendCopyFail('webhook-inbox: COPY is not supported here');
  }
  handleCopyData(): void {}

  #fail(err: unknown): void {
    // PostgreSQL skipped everything after the failed step, and may have failed its Parse: those
    // statements are not known to exist, and are closed and parsed again next time.
    for (const i of this.#parsedHere)
      if (i >= this.#at) this.session.parsed.delete((this.steps[i] as PipelineStep).name);
    if (this.#settled) return;
    this.#settled = true;
    this.reject(err);
  }
}

/** The part of node-postgres's connection a pipeline writes to. */
interface PgConnectionMessages {
  stream: { cork?(): void; uncork?(): void };
  close(message: { type: 'S'; name: string }): void;
  parse(message: { name: string; text: string; types: unknown[] }): void;
  bind(message: {
    statement: string;
    values: readonly unknown[];
    valueMapper: (value: unknown) => unknown;
  }): void;
  describe(message: { type: 'P'; name: string }): void;
  execute(message: object): void;
  sync(): void;
}
