// ioredis settings BullMQ needs, per role.

import type { RedisOptions } from 'ioredis';
import { createRedisClient, type RedisClient } from '../../lib/redis/client.ts';

/**
 * - `producer`: enqueues (watcher, CLI). Fails fast while Redis is away instead of queueing
 *   commands in memory: the watcher re-enqueues every key after a reconnect anyway. (A Cluster
 *   client keeps its offline queue: see redis-client.ts.)
 * - `worker`: BullMQ workers block on Redis and must retry forever
 *   (`maxRetriesPerRequest: null` is required by BullMQ).
 */
export type RedisRole = 'producer' | 'worker';

export function redisOptions(role: RedisRole): RedisOptions {
  return role === 'worker'
    ? { maxRetriesPerRequest: null, enableReadyCheck: true }
    : { maxRetriesPerRequest: 3, enableOfflineQueue: false, enableReadyCheck: true };
}

/** A client for any --redis-url form: one Redis, Sentinel (`redis+sentinel://`) or Cluster (`redis+cluster://`). */
export function createRedis(url: string, role: RedisRole): RedisClient {
  return createRedisClient(url, redisOptions(role));
}

/** Resolves when the client is ready (needed with enableOfflineQueue: false). */
export async function ready(redis: RedisClient): Promise<RedisClient> {
  if (redis.status === 'ready') return redis;
  await new Promise<void>((resolve, reject) => {
    const onReady = () => {
      redis.off('error', onError);
      resolve();
    };
    const onError = (err: Error) => {
      redis.off('ready', onReady);
      reject(err);
    };
    redis.once('ready', onReady);
    redis.once('error', onError);
  });
  return redis;
}
