/**
 * The `bodySchema` option (`schema` is the Postgres schema's): a body checked at the door, before anything is stored or the handler
 * runs. It accepts any Standard Schema (https://standardschema.dev: zod 3.24+, valibot 1,
 * arktype 2, effect/schema, …) through the common `~standard` property, so the inbox depends on
 * none of them. A failing body is 422 naming the path of the first issue; a passing one's
 * validated (possibly transformed) value is `event.body`.
 *
 * One option, resolved here into one shape (`BodySchema`), so that another kind of schema can
 * be accepted by adding a branch to {@link resolveBodySchema}.
 */
import { InboxOptionsError, InvalidDeliveryError } from './errors.js';

/**
 * The Standard Schema v1 interface, as much of it as the inbox uses. Copied, as the spec
 * recommends, rather than imported: no dependency for users.
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

/** A Standard Schema's answer: the value, or the issues. */
export type StandardResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<StandardIssue> };

/** One problem a Standard Schema found: a message and where. */
export interface StandardIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}

/** The `bodySchema` option, resolved: checks a parsed body and returns the value the handler gets. */
export interface BodySchema {
  /** The vendor (`zod`, `valibot`, …), for logs. */
  readonly vendor: string;
  /** Resolves to the validated value; rejects with a 422 InvalidDeliveryError naming the path. */
  check(body: unknown): Promise<unknown>;
}

/** Validates the `bodySchema` option; `undefined` when it is not given. */
export function resolveBodySchema(schema: unknown): BodySchema | undefined {
  if (schema === undefined) return undefined;
  const standard = (schema as Partial<StandardSchemaV1> | null)?.['~standard'];
  if (standard?.version !== 1 || typeof standard.validate !== 'function') {
    throw new InboxOptionsError(
      'bodySchema',
      'must be a Standard Schema (zod, valibot, arktype…: an object with a `~standard` property of version 1)',
    );
  }
  const validate = standard.validate.bind(standard);
  return {
    vendor: String(standard.vendor),
    async check(body) {
      if (Buffer.isBuffer(body)) {
        throw new InvalidDeliveryError(
          'body',
          'body must be JSON (the inbox validates it against its schema)',
          415,
        );
      }
      const result = await validate(body);
      if (result.issues) throw invalidBody(result.issues);
      return result.value;
    },
  };
}

/** `/items/0/price` from a Standard Schema issue path; `` (the body itself) when it has none. */
export function pointerOf(path: StandardIssue['path']): string {
  if (!path || path.length === 0) return '';
  return path
    .map((segment) => {
      const key = typeof segment === 'object' && segment !== null ? segment.key : segment;
      return `/${String(key).replace(/~/g, '~0').replace(/\//g, '~1')}`;
    })
    .join('');
}

/**
 * 422 naming the first issue's path as a JSON pointer into the body (`body /amount`), as the
 * `fields` option's body sources are named. The schema's own message is the detail: it describes
 * the sender's body, not the receiver's internals.
 */
function invalidBody(issues: ReadonlyArray<StandardIssue>): InvalidDeliveryError {
  const first = issues[0];
  const pointer = pointerOf(first?.path);
  const field = pointer ? `body ${pointer}` : 'body';
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more)` : '';
  const message = String(first?.message ?? 'invalid').slice(0, 300);
  return new InvalidDeliveryError(field, `${field}: ${message}${more}`, 422);
}
