// Html(constant) only wraps this file's own CSS and script, never a value from input.
import { Html, html } from './html.js';

export interface PageContext {
  readonly base: string;
  readonly nonce: string;
  readonly user?: string;
  readonly csrf?: string;
  readonly readOnly: boolean;
  readonly appliesHere: boolean;
}

const STYLE = `
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6rem 1.2rem;display:flex;gap:1.2rem;align-items:center}
header a{color:#cfe1ff;text-decoration:none}header a:hover{text-decoration:underline}
header .who{margin-left:auto;color:#aab}
header form{display:inline;margin:0}
main{padding:1rem 1.2rem;max-width:1200px}
h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.05rem;margin:1.4rem 0 .5rem}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#eef0f3;font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:.8rem}
.card{background:#fff;border:1px solid #e3e6ea;border-radius:6px;padding:.6rem .9rem;min-width:8rem}
.card b{display:block;font-size:1.4rem}.card.bad b{color:#b3261e}
pre{background:#fff;border:1px solid #e3e6ea;padding:.6rem;overflow:auto;white-space:pre-wrap;word-break:break-all}
.notice{background:#e8f3ff;border:1px solid #b6d4fb;padding:.6rem;border-radius:4px}
.error{background:#fdecea;border:1px solid #f5c2c0;padding:.6rem;border-radius:4px}
button{background:#2457c5;color:#fff;border:0;border-radius:4px;padding:.35rem .8rem;cursor:pointer}
button.danger{background:#b3261e}
form.inline{display:inline}
.filters{display:flex;gap:.6rem;flex-wrap:wrap;align-items:end;margin-bottom:.8rem}
.filters label{display:flex;flex-direction:column;font-size:.85rem}
code{background:#eef0f3;padding:0 .2rem}
svg{background:#fff;border:1px solid #e3e6ea}
`;

// Progressive: the pages work without it. Adds "select all" to bulk forms.
const SCRIPT = `
document.querySelectorAll('input[data-select-all]').forEach(function (all) {
  all.addEventListener('change', function () {
    all.form.querySelectorAll('input[name=target]').forEach(function (box) { box.checked = all.checked; });
  });
});
`;

export function layout(ctx: PageContext, title: string, body: Html): string {
  const nav = ctx.user
    ? html`<a href="${ctx.base}/">Overview</a><a href="${ctx.base}/dead-letters">Dead letters</a><a href="${ctx.base}/ignored">Ignored</a><a href="${ctx.base}/keys">Keys</a>
<form method="get" action="${ctx.base}/search"><input name="id" placeholder="event id" aria-label="Search by event id"> <button>Find</button></form>
<span class="who">${ctx.user}${ctx.readOnly ? ' (read-only)' : ''}</span>
<form method="post" action="${ctx.base}/logout"><input type="hidden" name="csrf" value="${ctx.csrf}"><button>Log out</button></form>`
    : html``;
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>${title} · webhook-inbox</title><style nonce="${ctx.nonce}">${new Html(STYLE)}</style></head>
<body><header><strong>webhook-inbox</strong>${nav}</header>
<main>${body}</main>
<script nonce="${ctx.nonce}">${new Html(SCRIPT)}</script></body></html>`.markup;
}
