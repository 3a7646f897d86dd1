// The queue's guarantees across worker processes, under a random event stream over many keys,
// random processing delays and random SIGKILLs of workers.

import assert from 'node:assert/strict';
import { fork, type ChildProcess } from 'node:child_process';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import { WorkQueue } from '../../../control-plane/queue/work-queue.ts';
import { redisUrl, uniquePrefix } from '../../support/redis.ts';
import { sleep } from './harness.ts';
import { eventually } from '../../support/poll.ts';

const workerScript = new URL('./worker-process.ts', import.meta.url).pathname;

interface ChaosOptions {
  coalesce: boolean;
  events: number;
  keys: number;
  /** Kill a random worker (SIGKILL) and start a new one about this often; 0 = never. */
  killEveryMs: number;
}

interface Report {
  events: number;
  runs: number;
  kills: number;
  /** Runs in progress in killed workers (each must run again elsewhere). */
  interruptedRuns: number;
  overlappingKeys: string[];
  /** Keys whose last enqueue was never followed by a run that started after it and ended done. */
  unconvergedKeys: string[];
  seconds: number;
}

async function chaos(opts: ChaosOptions): Promise<Report> {
  const prefix = uniquePrefix(opts.coalesce ? 'chaos' : 'chaos-nocoalesce');
  const t = `${prefix}:t`;
  const redis = new Redis(redisUrl(), { maxRetriesPerRequest: null });
  const queue = new WorkQueue({ connection: redisUrl(), prefix, coalesce: opts.coalesce });
  const workers = new Set<ChildProcess>();
  const everyWorker = new Set<ChildProcess>();
  let interruptedRuns = 0;
  const started = Date.now();

  const spawnWorker = async () => {
    const child = fork(workerScript, [], {
      env: { ...process.env, PREFIX: prefix, MAX_DELAY_MS: '25' },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    everyWorker.add(child);
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (code) =>
        reject(new Error(`worker exited with ${code} before it was ready`)),
      );
    });
    workers.add(child); // only ready workers are candidates for a kill
  };
  // After a SIGKILL the dead process's runs are over: drop them from the overlap detector.
  const kill = async (child: ChildProcess) => {
    workers.delete(child);
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    const running = await redis.smembers(`${t}:running:${child.pid}`);
    interruptedRuns += running.length;
    for (const entry of running) {
      const [key, runId] = entry.split('|');
      await redis.srem(`${t}:active:${key}`, runId ?? '');
    }
    await redis.del(`${t}:running:${child.pid}`);
  };

  try {
    await Promise.all([spawnWorker(), spawnWorker(), spawnWorker()]);
    let streaming = true;
    let kills = 0;
    const spawning: Promise<void>[] = [];
    const killer = (async () => {
      while (opts.killEveryMs > 0 && streaming) {
        await sleep(opts.killEveryMs * (0.5 + Math.random()));
        if (!streaming) break;
        const victims = [...workers];
        const victim = victims[Math.floor(Math.random() * victims.length)];
        if (!victim) continue;
        await kill(victim);
        kills++;
        spawning.push(spawnWorker()); // in the background: the others carry on meanwhile
      }
    })();

    // Bursts over skewed keys: a few hot keys get most events, like a rollout.
    let sent = 0;
    // Keep streaming until the killer struck a few times (bounded), so every run sees kills.
    const enough = () =>
      sent >= opts.events && (opts.killEveryMs === 0 || kills >= 3 || sent >= 3 * opts.events);
    while (!enough()) {
      const left = sent < opts.events ? opts.events - sent : 3 * opts.events - sent;
      const burst = Math.min(left, 50 + Math.floor(Math.random() * 250));
      await Promise.all(
        Array.from({ length: burst }, async () => {
          const key = `obj/k${Math.floor(opts.keys * Math.random() ** 2)}`;
          await redis.incr(`${t}:seq:${key}`);
          await queue.enqueue(key);
        }),
      );
      sent += burst;
      await sleep(Math.random() * 60);
    }
    streaming = false;
    await killer;
    await Promise.all(spawning);

    // Drained: nothing pending (stalled jobs of killed workers need their lock to expire first).
    await eventually('queue drained', async () => (await queue.pending()) === 0, 30_000);

    const overlappingKeys = await redis.smembers(`${t}:overlaps`);
    const unconvergedKeys: string[] = [];
    for (let k = 0; k < opts.keys; k++) {
      const key = `obj/k${k}`;
      const seq = Number((await redis.get(`${t}:seq:${key}`)) ?? 0);
      const converged = Number((await redis.zscore(`${t}:converged`, key)) ?? -1);
      if (seq > 0 && converged < seq) unconvergedKeys.push(key);
    }
    const runs = Number(await redis.get(`${t}:runs`));
    return {
      events: sent,
      runs,
      kills,
      interruptedRuns,
      overlappingKeys,
      unconvergedKeys,
      seconds: (Date.now() - started) / 1000,
    };
  } finally {
    // SIGTERM: graceful shutdown must let every worker exit on its own.
    await Promise.all(
      [...everyWorker]
        .filter((child) => child.exitCode === null && child.signalCode === null)
        .map(
          (child) =>
            new Promise((resolve) => {
              child.once('exit', resolve);
              child.kill('SIGTERM');
            }),
        ),
    );
    await queue.queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  }
}

test('3+ worker processes with random kills: no key runs twice at once, every last enqueue is served, bursts coalesce', async (t) => {
  const report = await chaos({ coalesce: true, events: 6000, keys: 80, killEveryMs: 500 });
  t.diagnostic(JSON.stringify(report));
  assert.ok(report.kills >= 3, `workers were killed (${report.kills})`);
  assert.ok(report.interruptedRuns > 0, 'some kills hit runs in progress');
  assert.deepEqual(report.overlappingKeys, [], 'no key ran concurrently');
  assert.deepEqual(report.unconvergedKeys, [], 'every key ran to done after its last enqueue');
  assert.ok(
    report.runs < report.events / 2,
    `runs (${report.runs}) well below events (${report.events})`,
  );
});

test('the checker catches violations: with coalescing off, keys run concurrently', async (t) => {
  const report = await chaos({ coalesce: false, events: 1500, keys: 20, killEveryMs: 0 });
  t.diagnostic(JSON.stringify(report));
  assert.ok(report.overlappingKeys.length > 0, 'overlaps are detected without coalescing');
  assert.ok(report.runs >= report.events, 'every event ran');
});
