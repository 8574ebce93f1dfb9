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
