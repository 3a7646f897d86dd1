// A worker process for the multi-process test. Its handler records, in Redis, when each key
// runs, so the parent can check the queue's guarantees across processes:
//   <t>:active:<key>   set of runs of the key in progress (more than one = overlap)
//   <t>:overlaps       keys that ever ran twice at once
//   <t>:seq:<key>      the parent's enqueue counter for the key (incremented before enqueue)
//   <t>:converged      sorted set key → highest seq seen at the start of a run that ended done
//   <t>:running:<pid>  this process's runs in progress, for the parent to clean after a SIGKILL
//   <t>:runs           number of runs started
// Env: REDIS_URL, PREFIX, MAX_DELAY_MS.

import { pino } from 'pino';
import { Redis } from 'ioredis';
import { requeueAfter } from '../../../control-plane/queue/outcome.ts';
import { RedisScript } from '../../../lib/redis/script.ts';
import { runWorker } from '../../../control-plane/queue/run-worker.ts';

const url = process.env.REDIS_URL ?? '';
const prefix = process.env.PREFIX ?? '';
const maxDelayMs = Number(process.env.MAX_DELAY_MS ?? 20);
const t = `${prefix}:t`;
const redis = new Redis(url, { maxRetriesPerRequest: null });

const startRun = new RedisScript(`
if redis.call('SCARD', KEYS[1]) > 0 then redis.call('SADD', KEYS[2], ARGV[2]) end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[2] .. '|' .. ARGV[1])
redis.call('INCR', KEYS[5])
return tonumber(redis.call('GET', KEYS[4]) or '0')
`);

let runs = 0;
await runWorker({
  connection: url,
  prefix,
  concurrency: 4,
  logger: pino({ level: 'silent' }),
  lockDurationMs: 1000,
  stalledIntervalMs: 500,
  shutdownGraceMs: 2000,
  backoff: { baseMs: 20, capMs: 200, jitter: 0.5 },
  handlers: {
    obj: async (key) => {
      const runId = `${process.pid}.${runs++}`;
      const seq = Number(
        await startRun.run(
          redis,
          [
            `${t}:active:${key}`,
            `${t}:overlaps`,
            `${t}:running:${process.pid}`,
            `${t}:seq:${key}`,
            `${t}:runs`,
          ],
          [runId, key],
        ),
      );
      await new Promise((resolve) => setTimeout(resolve, Math.random() * maxDelayMs));
      const roll = Math.random();
      await redis
        .multi()
        .srem(`${t}:active:${key}`, runId)
        .srem(`${t}:running:${process.pid}`, `${key}|${runId}`)
        .exec();
      if (roll < 0.1) throw new Error('random retryable failure');
      if (roll < 0.15) return requeueAfter(30);
      await redis.zadd(`${t}:converged`, 'GT', seq, key);
    },
  },
});
process.send?.('ready');
