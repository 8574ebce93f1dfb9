/**
 * What PostgreSQL itself says a statement read: a pool whose connections load auto_explain
 * (ANALYZE, nested statements, sent to the client as notices), and the scan nodes of every plan
 * reported while `scansDuring` runs. For tests that hold a statement to a bounded read on real
 * PostgreSQL (test/claims-read-a-bounded-buffer.test.ts, test/sweeper-reads-the-keys-it-examines.test.ts).
 */
import pg from 'pg';

/** A scan node of a plan auto_explain reported, with the rows it read. */
export interface Scan {
  readonly statement: string;
  readonly node: string;
  readonly rows: number;
}

export interface RecordedPool {
  readonly pool: pg.Pool;
  /** The scan nodes of what `run` sends on the pool's connections. */
  scansDuring(run: () => Promise<unknown>): Promise<Scan[]>;
}

export function recordedPool(connectionString: string, max = 2): RecordedPool {
  // Every plan the pool's connections report while `recording`; nothing else reaches them.
  let recording = false;
  const scans: Scan[] = [];
  const pool = new pg.Pool({
    connectionString,
    max,
    options: [
      '-c session_preload_libraries=auto_explain',
      '-c auto_explain.log_min_duration=0',
      '-c auto_explain.log_analyze=on',
      '-c auto_explain.log_nested_statements=on',
      '-c auto_explain.log_format=json',
      '-c auto_explain.log_level=notice',
    ].join(' '),
  });
  pool.on('connect', (client) =>
    client.on('notice', (notice) => {
      if (recording && notice.message?.includes('plan:')) scans.push(...scansOf(notice.message));
    }),
  );
  return {
    pool,
    async scansDuring(run) {
      scans.length = 0;
      recording = true;
      try {
        await run();
      } finally {
        recording = false;
      }
      return scans.splice(0);
    },
  };
}

/** The scan nodes of one auto_explain report (`duration: … ms  plan:` then the JSON plan). */
function scansOf(message: string): Scan[] {
  const report = JSON.parse(message.slice(message.indexOf('{')));
  const statement: string = report['Query Text'];
  const found: Scan[] = [];
  const walk = (node: any) => {
    if (node['Relation Name']) {
      const direction = node['Scan Direction'] === 'Backward' ? ' Backward' : '';
      const index = node['Index Name'] ? ` using ${node['Index Name']}` : '';
      found.push({
        statement,
        node: `${node['Node Type']}${direction}${index} on ${node['Relation Name']}`,
        // Rows it read: those it returned and those its filter threw away.
        rows: (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0)) * node['Actual Loops'],
      });
    }
    for (const child of node.Plans ?? []) walk(child);
  };
  walk(report.Plan);
  return found;
}
