/**
 * Routing by event type, with GitHub (docs/routing.md shows this file): the type is
 * `X-GitHub-Event` joined with the body's `action` (`issues.opened`), as Octokit names them.
 * The map is written by hand for the fields this app reads; the types of `@octokit/webhooks`
 * can take its place.
 */

import { github } from '../../src/delivery/providers.js';
import { createInbox, type DatabaseInput, type Handlers } from '../../src/index.js';

interface Issue {
  action: 'opened' | 'closed' | 'reopened';
  issue: { number: number; title: string };
  repository: { full_name: string };
}

interface GitHubEventMap {
  'issues.opened': Issue & { action: 'opened' };
  'issues.closed': Issue & { action: 'closed' };
  'issues.reopened': Issue & { action: 'reopened' };
  push: { ref: string; commits: { id: string }[]; repository: { full_name: string } };
  ping: { zen: string; hook_id: number };
}

interface DB {
  issues: { repository: string; number: number; title: string; state: string };
}

export const githubHandlers = {
  async 'issues.*'(event, { tx }) {
    const { issue, repository, action } = event.body;
    const state = action === 'closed' ? 'closed' : 'open';
    await tx
      .insertInto('issues')
      .values({ repository: repository.full_name, number: issue.number, title: issue.title, state })
      .onConflict((c) => c.columns(['repository', 'number']).doUpdateSet({ title: issue.title, state }))
      .execute();
  },
  push: (event) => ({ commits: event.body.commits.length }),
  ping: (event) => ({ pong: event.body.hook_id }),
} satisfies Handlers<GitHubEventMap, DB>;

export function githubInbox(options: { db: DatabaseInput; secret: string }) {
  return createInbox<DB>({
    db: options.db,
    provider: github({ secret: options.secret }),
    handlers: githubHandlers,
  });
}
