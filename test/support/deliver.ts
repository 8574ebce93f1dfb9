/** Sends one delivery over a real socket, as a webhook sender would, and returns what it sees. */
export interface SenderReply {
  status: number;
  body: any;
  headers: Headers;
}

export async function deliver(
  baseUrl: string,
  id: string,
  body: unknown,
  order?: { key: string; seq: number },
): Promise<SenderReply> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'idempotency-key': id };
  if (order) {
    headers['x-key'] = order.key;
    headers['x-seq'] = String(order.seq);
  }
  const res = await fetch(`${baseUrl}/webhooks`, { method: 'POST', headers, body: JSON.stringify(body) });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed, headers: res.headers };
}
