import type { OnDeadLetter } from '../../src/index.js';

/**
 * `onDeadLetter` for Slack and PagerDuty: a Slack message per dead letter, and one PagerDuty
 * incident per cause (the cause is the dedup key, so 500 dead letters of one bug page once).
 * The inbox does not await it, and logs what it throws: an alert that fails never fails a delivery.
 */
export function deadLetterAlerts(options: {
  /** A Slack incoming webhook URL. */
  slackWebhookUrl?: string;
  /** A PagerDuty Events API v2 routing key, and where to send (its default: PagerDuty's). */
  pagerDutyRoutingKey?: string;
  pagerDutyUrl?: string;
}): OnDeadLetter {
  return async (event, cause) => {
    const what = `${event.source}/${event.id}${event.key ? ` (key ${event.key}, seq ${event.seq})` : ''}`;
    const summary = `webhook-inbox: ${what} dead-lettered (${event.reason}, cause ${cause.fingerprint ?? '-'}): ${cause.message ?? 'late'}`;
    const sent: Promise<Response>[] = [];
    if (options.slackWebhookUrl) {
      sent.push(
        fetch(options.slackWebhookUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ text: summary }),
        }),
      );
    }
    if (options.pagerDutyRoutingKey && cause.fingerprint) {
      sent.push(
        fetch(options.pagerDutyUrl ?? 'https://events.pagerduty.com/v2/enqueue', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            routing_key: options.pagerDutyRoutingKey,
            event_action: 'trigger',
            dedup_key: `webhook-inbox:${event.source}:${cause.fingerprint}`,
            payload: { summary: summary.slice(0, 1024), source: event.source, severity: 'error' },
          }),
        }),
      );
    }
    for (const response of await Promise.all(sent)) {
      if (!response.ok) throw new Error(`alert refused: ${response.status} from ${response.url}`);
    }
  };
}
