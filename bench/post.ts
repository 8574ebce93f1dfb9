/**
 * One webhook delivery over a real socket, as the benchmarks' senders make it: a JSON body
 * with its idempotency key, on a keep-alive agent of the caller's; resolves with the status.
 */
import { type Agent, request } from 'node:http';

export function postDelivery(
  agent: Agent,
  target: string,
  id: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      target,
      {
        method: 'POST',
        agent,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'idempotency-key': id,
          ...headers,
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}
