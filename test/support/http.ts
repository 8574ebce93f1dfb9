import { request } from 'node:http';

/** Posts one delivery over a real socket and returns what a sender would see. */
export interface Reply {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

export async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
  options: { raw?: boolean } = {},
): Promise<Reply> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: options.raw ? (body as string | Buffer) : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, headers: res.headers, body: parsed, text };
}

export async function getJson(url: string): Promise<any> {
  const res = await fetch(url);
  return res.json();
}

/**
 * One request with headers fetch() will not send as given (`Host`), over node:http: what a
 * page whose name was re-pointed at the server (DNS rebinding) makes its browser send.
 */
export function rawRequest(
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: options.method ?? 'GET', headers: options.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () =>
        resolve({
          status: res.statusCode!,
          headers: res.headers,
          text: Buffer.concat(chunks).toString('utf8'),
        }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(options.body);
  });
}
