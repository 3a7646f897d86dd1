// npm run bench:queue — the work queue under a bursty event stream, against plain BullMQ
// adds (no coalescing) as the baseline, in one run. Uses REDIS_URL or starts its own Redis.

import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { startRedis } from '../tooling/cluster/redis.ts';
import { runWorker, type RunningWorker } from '../control-plane/queue/run-worker.ts';
import { WorkQueue } from '../control-plane/queue/work-queue.ts';

const events = Number(process.env.BENCH_EVENTS ?? 20_000);
const keys = Number(process.env.BENCH_KEYS ?? 100);
const workers = 3;
const concurrency = 8;
const jobMs = 5;
const inFlight = 64;

async function scenario(url: string, coalesce: boolean) {
  const prefix = `bench-${randomUUID().slice(0, 8)}`;
  const queue = new WorkQueue({ connection: url, prefix, coalesce });
  let runs = 0;
  const running: RunningWorker[] = [];
  for (let i = 0; i < workers; i++) {
    running.push(
      await runWorker({
        connection: url,
        prefix,
        concurrency,
        handleSignals: false,
        logger: pino({ level: 'silent' }),
        handlers: {
          obj: async () => {
            runs++;
            await new Promise((resolve) => setTimeout(resolve, jobMs));
          },
        },
      }),
    );
  }
  // Skewed keys (a few hot ones), `inFlight` adds at a time: a watcher replaying a rollout.
  const started = performance.now();
  let next = 0;
  let coalescedAdds = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < events) {
        next++;
        const { coalesced } = await queue.enqueue(`obj/k${Math.floor(keys * Math.random() ** 2)}`);
        if (coalesced) coalescedAdds++;
      }
    }),
  );
  const enqueueSeconds = (performance.now() - started) / 1000;
  while ((await queue.pending()) > 0) await new Promise((resolve) => setTimeout(resolve, 20));
  const totalSeconds = (performance.now() - started) / 1000;
  await Promise.all(running.map((w) => w.close()));
  await queue.queue.obliterate({ force: true });
  await queue.close();
  return {
    mode: coalesce ? 'rollcall queue (coalescing)' : 'plain BullMQ adds (baseline)',
    events,
    enqueueSeconds,
    runs,
    totalSeconds,
    coalescedAdds,
  };
}

type Result = Awaited<ReturnType<typeof scenario>>;

function print(results: Result[]): void {
  const rows = results.map((r) => ({
    mode: r.mode,
    events: r.events,
    'events/s in': Math.round(r.events / r.enqueueSeconds),
    runs: r.runs,
    'runs/s': Math.round(r.runs / r.totalSeconds),
    'coalescing ratio (events per run)': (r.events / r.runs).toFixed(2),
    'coalesced adds': r.coalescedAdds,
    'drained after s': r.totalSeconds.toFixed(2),
  }));
  console.table(rows);
}

const redis = await startRedis({ log: (line) => console.error(line) });
try {
  console.log(
    `${events} events over ${keys} keys (skewed), ${workers} workers × concurrency ${concurrency}, ${jobMs} ms per run`,
  );
  const results = [await scenario(redis.url, true), await scenario(redis.url, false)];
  print(results);
  const [ours, baseline] = results as [Result, Result];
  console.log(
    `coalescing ran ${ours.runs} reconciles instead of ${baseline.runs} (${(100 * (1 - ours.runs / baseline.runs)).toFixed(1)}% fewer) ` +
      `and drained ${(baseline.totalSeconds / ours.totalSeconds).toFixed(1)}× sooner`,
  );
} finally {
  await redis.stop();
}
