// Phase 8, fan-out cost: Redis commands per pod event for a server with few policies and
// for one with many. New pods of a server may change every Policy of it; the watcher writes
// the pod's projection and enqueues one `fan-out/<server>` key whatever their number. Only
// this phase's watcher talks to Redis (no worker), so Redis' own command count is its cost.
import { Redis } from 'ioredis';
import { POLICY_SERVER_LABEL } from '../../api/constants.ts';
import { metric } from '../../test/support/prom-text.ts';
import { group, namespace, policyBody, version, type Bench } from '../context.ts';
import { pool, sleep, waitHttpOk } from '../support.ts';

export interface FanOutRow {
  policies: number;
  podEvents: number;
  commandsPerEvent: number;
}

const podsPerServer = 20;

async function commandsProcessed(redis: Redis): Promise<number> {
  const m = /total_commands_processed:(\d+)/.exec(await redis.info('stats'));
  return Number(m?.[1] ?? 0);
}

/**
 * What the watcher sends at rest (its Redis checks), per ms, once it is at rest: 1 s windows
 * until two in a row stay under `restPerSecond`. At full size its first writes of the memory
 * phase's 10,000 pods run on for a minute past /readyz at a steady rate; a rate sampled then
 * and subtracted made the cost of the next pod events negative.
 */
async function idleCommandsPerMs(redis: Redis, restPerSecond = 50): Promise<number> {
  let previous = Infinity;
  for (let window = 0; window < 300; window++) {
    const c0 = await commandsProcessed(redis);
    await sleep(1000);
    const count = (await commandsProcessed(redis)) - c0 - 1; // - 1: this INFO
    if (count < restPerSecond && previous < restPerSecond) return (count + previous) / 2000;
    previous = count;
  }
  throw new Error('fan-out: the watcher was still busy with Redis after 300 s');
}

export async function fanOut(bench: Bench): Promise<FanOutRow[]> {
  const few = Array.from({ length: 10 }, (_, i) => `fan-${i}`);
  await pool(few, 8, (n) =>
    bench.custom.createClusterCustomObject({
      group,
      version,
      plural: 'policies',
      body: policyBody(n, 'fan'),
    }),
  );
  const watcher = await bench.startRole(
    'watcher-fanout',
    'watcher',
    `${bench.redisUrl}/${++bench.phaseDb}`,
  );
  await waitHttpOk(watcher.port, '/readyz', 300_000);
  const redis = new Redis(bench.redisUrl);
  const handled = () =>
    metric(watcher.port, 'rollcall_watcher_event_seconds_count', {
      resource: 'pod',
      stage: 'enqueue',
    });
  const rows: FanOutRow[] = [];
  try {
    for (const [server, policies] of [
      ['fan', few.length],
      ['mem', bench.memNames.length],
    ] as const) {
      const idlePerMs = await idleCommandsPerMs(redis);
      const e0 = await handled();
      const c0 = await commandsProcessed(redis);
      const t0 = performance.now();
      const pods = Array.from({ length: podsPerServer }, (_, i) => `fan-${server}-${i}`);
      await pool(pods, 4, (name) =>
        bench.core.createNamespacedPod({
          namespace,
          body: {
            metadata: { name, labels: { [POLICY_SERVER_LABEL]: server } },
            spec: {
              schedulingGates: [{ name: 'bench.rollcall.dev/gated' }],
              containers: [{ name: 'c', image: 'sim://none' }],
            },
          },
        }),
      );
      // Every event of these pods handled (creations, and the scheduler's gated condition).
      let events = 0;
      const end = Date.now() + 120_000;
      for (let last = -1; events !== last || events < podsPerServer;) {
        if (Date.now() > end) throw new Error(`fan-out: ${events} pod events handled in 120 s`);
        last = events;
        await sleep(1000);
        events = (await handled()) - e0;
      }
      const commands = (await commandsProcessed(redis)) - c0 - idlePerMs * (performance.now() - t0);
      rows.push({ policies, podEvents: events, commandsPerEvent: commands / events });
      await bench.core.deleteCollectionNamespacedPod({
        namespace,
        labelSelector: `${POLICY_SERVER_LABEL}=${server}`,
        gracePeriodSeconds: 0,
      });
    }
  } finally {
    redis.disconnect();
    await bench.stopAll([watcher]);
    await pool(few, 8, (name) =>
      bench.custom.deleteClusterCustomObject({ group, version, plural: 'policies', name }),
    );
  }
  return rows;
}
