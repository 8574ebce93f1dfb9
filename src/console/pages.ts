import { formatDuration } from '../duration.js';
import type {
  DeadLetter,
  DeadLetterGroup,
  GroupSummary,
  IgnoredEvent,
  IgnoredType,
  InboxStatus,
  KeyDetail,
  KeySummary,
} from '../operations/index.js';
import type { DeadLetterQuery } from './filters.js';
import { type Html, href, html, query } from './html.js';
import { layout, type PageContext } from './layout.js';

export function seqRange(r: { fromSeq: number; toSeq: number }): string {
  return r.fromSeq === r.toSeq ? String(r.fromSeq) : `${r.fromSeq}–${r.toSeq}`;
}

function age(ms: number | null): string {
  return ms === null ? '—' : formatDuration(ms);
}

function eventLink(ctx: PageContext, d: { source: string; id: string }): Html {
  return html`<a href="${href(ctx.base, 'events', d.source, d.id)}">${d.id}</a>`;
}

function keyLink(ctx: PageContext, source: string, key: string | null): Html {
  return key === null ? html`—` : html`<a href="${href(ctx.base, 'keys', source, key)}">${key}</a>`;
}

function tableOrNone<T>(items: T[], head: Html, row: (item: T) => Html, testid?: string): Html {
  if (items.length === 0) return html`<p>None.</p>`;
  return html`<table${testid ? html` data-testid="${testid}"` : ''}>${head}${items.map(row)}</table>`;
}

function csrfField(ctx: PageContext): Html {
  return html`<input type="hidden" name="csrf" value="${ctx.csrf}">`;
}

function chart(perMinute: number[]): Html {
  const max = Math.max(1, ...perMinute);
  const bars = perMinute.map((n, i) => {
    const h = Math.round((n / max) * 80);
    return html`<rect x="${i * 10 + 1}" y="${90 - h}" width="8" height="${h}" fill="#2457c5"><title>${n} processed, ${59 - i} min ago</title></rect>`;
  });
  return html`<svg role="img" aria-label="Events processed per minute, last hour" width="602" height="100" viewBox="0 0 602 100">${bars}<text x="4" y="12" font-size="10">max ${max}/min</text></svg>`;
}

export function overviewPage(
  ctx: PageContext,
  s: InboxStatus,
  perMinute: number[],
  blocked: KeySummary[],
  causes: DeadLetterGroup[],
  groups: GroupSummary[] = [],
): string {
  const card = (label: string, value: unknown, bad = false) =>
    html`<div class="card${bad ? ' bad' : ''}"><b>${value}</b>${label}</div>`;
  const body = html`<h1>Overview</h1>
<div class="cards" data-testid="counts">
${card('pending', s.events.pending)}${card('held', s.events.held)}${card('processed', `${s.processedIsEstimate ? '~' : ''}${s.events.processed}`)}
${card('dead letters', s.events.dead, s.events.dead > 0)}${card('blocked keys', s.keys.blocked, s.keys.blocked > 0)}
${card('keys holding events', s.keys.holding)}${card('oldest gap (held)', age(s.oldestHeldAgeMs))}${card('oldest pending', age(s.oldestPendingAgeMs))}
</div>
<h2>Processed per minute, last hour (${perMinute.reduce((a, b) => a + b, 0)} in all)</h2>
${chart(perMinute)}
<h2>Dead letters by reason</h2>
${tableOrNone(
  Object.entries(s.deadByReason),
  html`<tr><th>reason</th><th>count</th></tr>`,
  ([reason, n]) =>
    html`<tr><td><a href="${ctx.base}/dead-letters${query({ reason })}">${reason}</a></td><td>${n}</td></tr>`,
)}
<h2>Dead letters by cause</h2>
${tableOrNone(
  causes,
  html`<tr><th>cause</th><th>reason</th><th>count</th><th>first failed</th><th>last failed</th><th>keys</th><th>sample</th></tr>`,
  (g) =>
    html`<tr><td><a href="${ctx.base}/dead-letters${query({ cause: g.cause ?? '', reason: g.reason ?? '' })}">${g.cause ?? '(none)'}</a></td><td>${g.reason ?? ''}</td><td>${g.count}</td><td>${g.firstAt.toISOString()}</td><td>${g.lastAt.toISOString()}</td><td>${g.keys}</td><td>${oneLine(g.sample.error)}</td></tr>`,
  'causes',
)}
<h2>Ignored by type (no handler takes them)</h2>
${tableOrNone(
  Object.entries(s.ignoredByType),
  html`<tr><th>type</th><th>count</th></tr>`,
  ([type, n]) =>
    html`<tr><td><a href="${ctx.base}/ignored${query({ type })}">${type || '(none)'}</a></td><td>${n}</td></tr>`,
)}
<h2>Busiest groups</h2>
${tableOrNone(
  groups,
  html`<tr><th>source</th><th>group</th><th>pending</th><th>due</th><th>running</th><th>held until</th><th>oldest</th></tr>`,
  (g) =>
    html`<tr><td>${g.source}</td><td>${g.group}</td><td>${g.pending}</td><td>${g.due}</td><td>${g.running}</td><td>${g.heldUntil?.toISOString() ?? ''}</td><td>${age(g.oldestAgeMs)}</td></tr>`,
  'groups',
)}
<h2>Blocked keys</h2>
${blocked.length === 0 ? html`<p>None.</p>` : keysTable(ctx, blocked)}
<p>Sources: ${s.sources.join(', ') || '(none)'}</p>`;
  return layout(ctx, 'Overview', body);
}

export function deadLettersPage(ctx: PageContext, filter: DeadLetterQuery, list: DeadLetter[]): string {
  const option = (value: string, label: string) =>
    html`<option value="${value}"${filter.reason === value ? html` selected` : ''}>${label}</option>`;
  const actions = !ctx.readOnly && list.length > 0;
  const body = html`<h1>Dead letters</h1>
<form method="get" class="filters" action="${ctx.base}/dead-letters">
<label>reason <select name="reason">${option('', 'any')}${option('poison', 'poison')}${option('late', 'late')}${option('rejected', 'rejected')}</select></label>
<label>source <input name="source" value="${filter.source ?? ''}"></label>
<label>cause <input name="cause" value="${filter.cause ?? ''}" size="12"></label>
<label>key <input name="key" value="${filter.key ?? ''}" placeholder="acct_*"></label>
<label>type <input name="type" value="${filter.type ?? ''}"></label>
<label>failed since <input name="since" value="${filter.since ?? ''}" placeholder="10:00 or 2h" size="10"></label>
<label>until <input name="until" value="${filter.until ?? ''}" placeholder="10:15" size="10"></label>
<label>older than <input name="olderThan" value="${filter.olderThan ?? ''}" placeholder="1h" size="6"></label>
<label>newer than <input name="newerThan" value="${filter.newerThan ?? ''}" placeholder="1d" size="6"></label>
<button>Filter</button></form>
${actions ? html`<form method="post" action="${ctx.base}/actions/replay">${csrfField(ctx)}` : ''}
<table><tr>${actions ? html`<th><input type="checkbox" data-select-all aria-label="select all"></th>` : ''}<th>id</th><th>source</th><th>key</th><th>seq</th><th>type</th><th>reason</th><th>cause</th><th>failed</th><th>attempts</th><th>age</th><th>blocks key</th><th>last error</th></tr>
${list.map(
  (
    d,
  ) => html`<tr>${actions ? html`<td><input type="checkbox" name="target" value="${`${encodeURIComponent(d.source)}/${encodeURIComponent(d.id)}`}" aria-label="select ${d.id}"></td>` : ''}
<td>${eventLink(ctx, d)}</td><td>${d.source}</td><td>${keyLink(ctx, d.source, d.key)}</td><td>${d.seq ?? '—'}</td><td>${d.type ?? '—'}</td><td>${d.deadReason}</td><td>${d.cause ?? '—'}</td><td>${d.failedAt?.toISOString() ?? '—'}</td><td>${d.attempts}</td><td>${age(d.ageMs)}</td><td>${d.blocking ? 'yes' : ''}</td><td>${oneLine(d.lastError)}</td></tr>`,
)}
</table>
${list.length === 0 ? html`<p>No dead letters${Object.values(filter).some(Boolean) ? ' match' : ''}.</p>` : ''}
${actions ? html`<p><button name="action" value="replay">Replay selected</button> <button class="danger" formaction="${ctx.base}/actions/skip" name="action" value="skip">Skip selected</button></p>` : ''}
${actions ? html`</form>` : ''}
${
  actions
    ? html`<form method="post" action="${ctx.base}/actions/replay-all">${csrfField(ctx)}
${Object.entries(filter).map(([name, value]) => (value ? html`<input type="hidden" name="${name}" value="${value}">` : ''))}
<button>Replay every dead letter matching the filter…</button></form>`
    : ''
}`;
  return layout(ctx, 'Dead letters', body);
}

export function ignoredPage(
  ctx: PageContext,
  type: string | undefined,
  types: IgnoredType[],
  list: IgnoredEvent[],
): string {
  const body = html`<h1>Ignored events${type === undefined ? '' : html` of type <code>${type}</code>`}</h1>
<p>Events whose type no handler takes: answered 200 and kept until retention. Write a handler for a type, then <code>webhook-inbox ignored replay --type T</code> applies them once.</p>
<table data-testid="ignored-types"><tr><th>source</th><th>type</th><th>count</th><th>last received</th></tr>
${types.map(
  (t) =>
    html`<tr><td>${t.source}</td><td><a href="${ctx.base}/ignored${query({ type: t.type ?? '' })}">${t.type ?? '(none)'}</a></td><td>${t.count}</td><td>${t.lastReceivedAt.toISOString()}</td></tr>`,
)}
</table>
${types.length === 0 ? html`<p>None.</p>` : ''}
<h2>${type === undefined ? 'Latest' : 'Events'}</h2>
<table data-testid="ignored-events"><tr><th>id</th><th>source</th><th>type</th><th>key</th><th>seq</th><th>age</th></tr>
${list.map(
  (e) =>
    html`<tr><td>${eventLink(ctx, e)}</td><td>${e.source}</td><td>${e.type ?? '—'}</td><td>${keyLink(ctx, e.source, e.key)}</td><td>${e.seq ?? '—'}</td><td>${age(e.ageMs)}</td></tr>`,
)}
</table>`;
  return layout(ctx, 'Ignored events', body);
}

function oneLine(text: string | null, max = 80): string {
  if (text === null) return '';
  const flat = text.replace(/\s+/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** A payload as an operator reads it: JSON pretty-printed, other UTF-8 as text, else base64. */
export function payloadText(payload: Buffer | null): { kind: string; text: string } {
  if (payload === null) return { kind: 'none', text: '(not stored)' };
  const text = new TextDecoder('utf-8', { fatal: false }).decode(payload);
  if (Buffer.from(text, 'utf8').equals(payload)) {
    try {
      return { kind: 'json', text: JSON.stringify(JSON.parse(text), null, 2) };
    } catch {
      return { kind: 'text', text };
    }
  }
  return { kind: 'base64', text: payload.toString('base64') };
}

function actionForm(
  ctx: PageContext,
  action: string,
  fields: Record<string, string>,
  label: string,
  danger = false,
): Html {
  return html`<form method="post" class="inline" action="${ctx.base}/actions/${action}">${csrfField(ctx)}
${Object.entries(fields).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`)}
<button${danger ? html` class="danger"` : ''}>${label}</button></form>`;
}

export function eventPage(ctx: PageContext, d: DeadLetter): string {
  const payload = payloadText(d.payload);
  const target = `${encodeURIComponent(d.source)}/${encodeURIComponent(d.id)}`;
  const actions =
    ctx.readOnly || d.status !== 'dead'
      ? html``
      : html`<p>${actionForm(ctx, 'replay', { target }, 'Replay')} ${
          d.key !== null ? actionForm(ctx, 'skip', { target }, 'Skip (move the key past it)', true) : ''
        }</p>`;
  const body = html`<h1>Event <code>${d.id}</code></h1>
${actions}
<table data-testid="event">
<tr><th>status</th><td>${d.status}${d.deadReason ? html` (${d.deadReason})` : ''}</td></tr>
<tr><th>source</th><td>${d.source}</td></tr>
<tr><th>key</th><td>${keyLink(ctx, d.source, d.key)}${d.blocking ? ' (blocks its key)' : ''}</td></tr>
<tr><th>seq</th><td>${d.seq ?? '—'}</td></tr>
<tr><th>type</th><td>${d.type ?? '—'}</td></tr>
<tr><th>attempts</th><td>${d.attempts}</td></tr>
<tr><th>received</th><td>${d.receivedAt.toISOString()} (${age(d.ageMs)} ago)</td></tr>
${d.retryAt ? html`<tr><th>retry_at</th><td>${d.retryAt.toISOString()}</td></tr>` : ''}
<tr><th>cause</th><td>${d.cause ?? '—'}${d.failedAt ? ` (failed ${d.failedAt.toISOString()})` : ''}</td></tr>
<tr><th>processed</th><td>${d.processedAt ? d.processedAt.toISOString() : '—'}</td></tr>
</table>
<h2>Last error</h2><pre data-testid="last-error">${d.lastError ?? '—'}</pre>
<h2>Headers</h2>
${
  d.headers && Object.keys(d.headers).length > 0
    ? html`<table data-testid="headers">${Object.entries(d.headers).map(([n, v]) => html`<tr><th>${n}</th><td>${v}</td></tr>`)}</table>`
    : html`<p>(not stored)</p>`
}
<h2>Payload (${payload.kind})</h2><pre data-testid="payload">${payload.text}</pre>`;
  return layout(ctx, `Event ${d.id}`, body);
}

function keysTable(ctx: PageContext, list: KeySummary[]): Html {
  return html`<table data-testid="keys"><tr><th>key</th><th>source</th><th>state</th><th>blocked at</th><th>next seq</th><th>held</th><th>first held</th><th>oldest held</th></tr>
${list.map(
  (k) =>
    html`<tr><td>${keyLink(ctx, k.source, k.key)}</td><td>${k.source}</td><td>${k.state}</td><td>${k.blockedSeq === null ? '—' : html`${k.blockedSeq} (${k.blockedReason})`}</td><td>${k.nextSeq}</td><td>${k.heldCount}</td><td>${k.firstHeldSeq ?? '—'}</td><td>${age(k.oldestHeldAgeMs)}</td></tr>`,
)}</table>`;
}

export function keysPage(ctx: PageContext, blockedOnly: boolean, list: KeySummary[]): string {
  const body = html`<h1>Keys ${blockedOnly ? 'blocked' : 'blocked or holding events'}</h1>
<p>${blockedOnly ? html`<a href="${ctx.base}/keys">Show keys holding events too</a>` : html`<a href="${ctx.base}/keys?blocked=1">Blocked only</a>`}</p>
${list.length === 0 ? html`<p>None.</p>` : keysTable(ctx, list)}`;
  return layout(ctx, 'Keys', body);
}

export function keyPage(ctx: PageContext, k: KeyDetail): string {
  const fields = { source: k.source, key: k.key };
  const actions =
    ctx.readOnly || k.state !== 'blocked'
      ? html``
      : html`<p>${actionForm(ctx, 'unblock', fields, 'Unblock (keep the cursor)')} ${actionForm(ctx, 'skip-key', fields, 'Skip what blocks it', true)}</p>`;
  const body = html`<h1>Key <code>${k.key}</code></h1>
${actions}
<table data-testid="key">
<tr><th>source</th><td>${k.source}</td></tr>
<tr><th>state</th><td data-testid="key-state">${k.state}${k.blockedSeq === null ? '' : html` at seq ${k.blockedSeq} (${k.blockedReason})`}</td></tr>
<tr><th>waits for seq</th><td>${k.nextSeq}</td></tr>
<tr><th>held seqs</th><td>${k.heldSeqs.join(', ') || '—'}</td></tr>
<tr><th>oldest held</th><td>${age(k.oldestHeldAgeMs)}</td></tr>
</table>
<h2>Gaps</h2>
${tableOrNone(
  k.gaps,
  html`<tr><th>seqs</th><th>reason</th><th>when</th></tr>`,
  (g) => html`<tr><td>${seqRange(g)}</td><td>${g.reason}</td><td>${g.createdAt.toISOString()}</td></tr>`,
)}
<h2>Dead letters</h2>
${tableOrNone(
  k.deadLetters,
  html`<tr><th>id</th><th>seq</th><th>type</th><th>reason</th><th>last error</th></tr>`,
  (d) =>
    html`<tr><td>${eventLink(ctx, d)}</td><td>${d.seq}</td><td>${d.type ?? '—'}</td><td>${d.deadReason}</td><td>${oneLine(d.lastError)}</td></tr>`,
)}`;
  return layout(ctx, `Key ${k.key}`, body);
}

export function confirmPage(
  ctx: PageContext,
  action: string,
  question: string,
  items: string[],
  fields: Array<[string, string]>,
): string {
  const body = html`<h1>Confirm</h1>
<p class="notice">${question}</p>
<ul>${items.slice(0, 200).map((item) => html`<li><code>${item}</code></li>`)}${items.length > 200 ? html`<li>… and ${items.length - 200} more</li>` : ''}</ul>
<form method="post" action="${ctx.base}/actions/${action}">${csrfField(ctx)}
${fields.map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`)}
<input type="hidden" name="confirmed" value="yes">
<button class="danger">Yes, ${action.replace('-', ' ')}</button> <a href="${ctx.base}/">Cancel</a></form>`;
  return layout(ctx, 'Confirm', body);
}

export function resultPage(
  ctx: PageContext,
  title: string,
  rows: Array<{ item: string; outcome: string; link?: string }>,
): string {
  const body = html`<h1>${title}</h1>
<p class="notice">${ctx.appliesHere ? 'Applied in this process.' : "Re-queued: the application's sweeper applies replays within its sweep interval."}</p>
<table data-testid="results"><tr><th>what</th><th>outcome</th></tr>${rows.map(
    (r) =>
      html`<tr><td>${r.link ? html`<a href="${r.link}">${r.item}</a>` : r.item}</td><td>${r.outcome}</td></tr>`,
  )}</table>
<p><a href="${ctx.base}/dead-letters">Dead letters</a> · <a href="${ctx.base}/keys">Keys</a></p>`;
  return layout(ctx, title, body);
}

export function messagePage(ctx: PageContext, title: string, message: string): string {
  return layout(
    ctx,
    title,
    html`<h1>${title}</h1><p class="error">${message}</p><p><a href="${ctx.base}/">Overview</a></p>`,
  );
}

export function loginPage(ctx: PageContext, failed: boolean): string {
  const body = html`<h1>Sign in to the console</h1>
${failed ? html`<p class="error">That token is not the console's.</p>` : ''}
<form method="post" action="${ctx.base}/login">
<label>Token <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button>Sign in</button></form>`;
  return layout(ctx, 'Sign in', body);
}
