/** `bodySchema`: a Standard Schema (through `~standard`), or a JSON Schema for Ajv, loaded only then. */
import { createRequire } from 'node:module';
import { InboxOptionsError, InvalidDeliveryError } from '../errors.js';

/** The Standard Schema v1 interface, as much of it as the inbox uses (copied, as the spec recommends). */
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
  /** For logs. */
  readonly vendor: string;
  /** Resolves to the validated value; rejects with a 422 InvalidDeliveryError naming the path. */
  check(body: unknown): Promise<unknown>;
}

/** A JSON Schema object: draft-07, 2019-09 or 2020-12 by its `$schema` (2020-12 without one). */
export interface JsonSchema {
  readonly $schema?: string;
  readonly [keyword: string]: unknown;
}

/** Validates the `bodySchema` option; `undefined` when it is not given. */
export function resolveBodySchema(schema: unknown, load: Require = defaultRequire): BodySchema | undefined {
  if (schema === undefined) return undefined;
  if (isJsonSchema(schema)) return jsonSchema(schema, load);
  const standard = (schema as Partial<StandardSchemaV1> | null)?.['~standard'];
  if (standard?.version !== 1 || typeof standard.validate !== 'function') {
    throw new InboxOptionsError(
      'bodySchema',
      'must be a Standard Schema (zod, valibot, arktype…: an object with a `~standard` property of version 1) or a JSON Schema object (with `$schema`, `type`, `properties`, `$ref`…)',
    );
  }
  const validate = standard.validate.bind(standard);
  return {
    vendor: String(standard.vendor),
    async check(body) {
      if (Buffer.isBuffer(body)) throw notJson();
      const result = await validate(body);
      if (result.issues) throw invalidBody(result.issues);
      return result.value;
    },
  };
}

function notJson(): InvalidDeliveryError {
  return new InvalidDeliveryError(
    'body',
    'body must be JSON (the inbox validates it against its schema)',
    415,
  );
}

/** How a module is loaded (a seam, so a test can make Ajv absent). */
export type Require = (id: string) => unknown;
const defaultRequire: Require = createRequire(import.meta.url);

/** Keywords that make an object a JSON Schema rather than a mistake (`{}`, `{ parse() {} }`). */
const JSON_SCHEMA_KEYWORDS = [
  '$schema',
  '$ref',
  '$id',
  'type',
  'properties',
  'required',
  'items',
  'prefixItems',
  'enum',
  'const',
  'allOf',
  'anyOf',
  'oneOf',
  'not',
  'if',
];

function isJsonSchema(value: unknown): value is JsonSchema {
  if (typeof value !== 'object' || value === null || '~standard' in value) return false;
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return false;
  return JSON_SCHEMA_KEYWORDS.some((k) => Object.hasOwn(value, k));
}

/** The dialects by their `$schema` (compared without scheme and trailing `#`), with Ajv's module. */
const DIALECTS = {
  'draft-07': { id: 'http://json-schema.org/draft-07/schema#', module: 'ajv' },
  '2019-09': { id: 'https://json-schema.org/draft/2019-09/schema', module: 'ajv/dist/2019' },
  '2020-12': { id: 'https://json-schema.org/draft/2020-12/schema', module: 'ajv/dist/2020' },
} as const;
type Dialect = keyof typeof DIALECTS;

function dialectOf(schema: JsonSchema): Dialect {
  const given = schema.$schema;
  if (given === undefined) return '2020-12';
  const bare = typeof given === 'string' ? given.replace(/^https?:\/\//, '').replace(/#$/, '') : '';
  for (const [dialect, { id }] of Object.entries(DIALECTS)) {
    if (id.replace(/^https?:\/\//, '').replace(/#$/, '') === bare) return dialect as Dialect;
  }
  throw new InboxOptionsError(
    'bodySchema',
    `has $schema ${JSON.stringify(given)}; supported: ${Object.values(DIALECTS)
      .map((d) => d.id)
      .join(', ')} (none means 2020-12)`,
  );
}

/** The part of Ajv the inbox uses, structurally (an optional peer). */
interface AjvError {
  readonly instancePath: string;
  readonly keyword: string;
  readonly params: Record<string, unknown>;
  readonly message?: string;
}
type AjvValidate = ((data: unknown) => boolean) & { errors?: AjvError[] | null };
type AjvClass = new (options: Record<string, unknown>) => { compile(schema: object): AjvValidate };

const INSTALL = 'npm install ajv ajv-formats';

/** `module.exports`, or its `default`. */
function exported<T>(mod: unknown): T {
  return ((mod as { default?: T })?.default ?? mod) as T;
}

function loadAjv(dialect: Dialect, load: Require): { Ajv: AjvClass; addFormats: (ajv: unknown) => unknown } {
  try {
    return {
      Ajv: exported<AjvClass>(load(DIALECTS[dialect].module)),
      addFormats: exported<(ajv: unknown) => unknown>(load('ajv-formats')),
    };
  } catch (err) {
    if ((err as { code?: string })?.code === 'MODULE_NOT_FOUND') {
      throw new InboxOptionsError(
        'bodySchema',
        `is a JSON Schema, which needs the optional peer dependencies ajv and ajv-formats: ${INSTALL}`,
      );
    }
    throw err;
  }
}

/** Compiled once, in strict mode (a misspelt keyword is refused); the body is never changed. */
function jsonSchema(schema: JsonSchema, load: Require): BodySchema {
  const dialect = dialectOf(schema);
  const { Ajv, addFormats } = loadAjv(dialect, load);
  let validate: AjvValidate;
  try {
    const ajv = new Ajv({ strictTypes: false, strictTuples: false, strictRequired: false, allErrors: false });
    addFormats(ajv);
    validate = ajv.compile(
      schema.$schema === undefined ? schema : { ...schema, $schema: DIALECTS[dialect].id },
    );
  } catch (err) {
    throw new InboxOptionsError(
      'bodySchema',
      `is not a valid JSON Schema (${dialect}): ${String((err as Error)?.message ?? err).slice(0, 500)}`,
    );
  }
  return {
    vendor: `json-schema ${dialect}`,
    async check(body) {
      if (Buffer.isBuffer(body)) throw notJson();
      if (validate(body)) return body;
      throw invalidJsonBody(validate.errors?.[0]);
    },
  };
}

/** A JSON pointer segment: `~` and `/` escaped (RFC 6901). */
function segment(key: string): string {
  return `/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
}

/** 422 naming where the body fails, as a JSON pointer (`body /data/amount`). */
function invalidJsonBody(error: AjvError | undefined): InvalidDeliveryError {
  let pointer = error?.instancePath ?? '';
  let message = error?.message ?? 'invalid';
  const p = error?.params ?? {};
  if (error?.keyword === 'required' && typeof p.missingProperty === 'string') {
    pointer += segment(p.missingProperty);
    message = 'is required';
  } else if (error?.keyword === 'additionalProperties' && typeof p.additionalProperty === 'string') {
    pointer += segment(p.additionalProperty);
    message = 'is not allowed';
  } else if (error?.keyword === 'enum' && Array.isArray(p.allowedValues)) {
    message = `must be one of ${p.allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
  }
  const field = pointer ? `body ${pointer}` : 'body';
  return new InvalidDeliveryError(field, `${field}: ${message}`.slice(0, 300), 422);
}

/** `/items/0/price` from a Standard Schema issue path; `` (the body itself) when it has none. */
export function pointerOf(path: StandardIssue['path']): string {
  if (!path || path.length === 0) return '';
  return path
    .map((part) => segment(String(typeof part === 'object' && part !== null ? part.key : part)))
    .join('');
}

/** 422 naming the first issue's path (`body /amount`); the schema's message describes the sender's body. */
function invalidBody(issues: ReadonlyArray<StandardIssue>): InvalidDeliveryError {
  const first = issues[0];
  const pointer = pointerOf(first?.path);
  const field = pointer ? `body ${pointer}` : 'body';
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more)` : '';
  const message = String(first?.message ?? 'invalid').slice(0, 300);
  return new InvalidDeliveryError(field, `${field}: ${message}${more}`, 422);
}
