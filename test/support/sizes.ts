/**
 * How big the suite's long runs are (a load, a property's runs, an end-to-end batch):
 * `WEBHOOK_INBOX_TEST_SIZE=quick` (the default: a contributor's `npm test`) or `full` (what
 * .ci/run sets). Every assertion holds at both sizes; the full size looks further for the rare
 * interleaving, and CI pays for it once per submission.
 */
const size = process.env.WEBHOOK_INBOX_TEST_SIZE ?? 'quick';
if (size !== 'quick' && size !== 'full') {
  throw new Error(`WEBHOOK_INBOX_TEST_SIZE must be quick or full; got ${size}`);
}

/** `quick` at the default size, `full` when WEBHOOK_INBOX_TEST_SIZE=full. */
export function sized<T>(quick: T, full: T): T {
  return size === 'full' ? full : quick;
}
