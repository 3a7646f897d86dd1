// Integration tests get their Redis from the test runner (one per `npm test` run).

import { randomUUID } from 'node:crypto';
import { after } from 'node:test';
import { Redis } from 'ioredis';
import { ProjectionStore } from '../../control-plane/projections/store.ts';

export function redisUrl(): string {
  const url = process.env.REDIS_URL;
  if (!url) throw new Error('integration tests need REDIS_URL; run them with `npm test`');
  return url;
}

/** A Redis key prefix no other test uses, so tests can share one Redis. */
export function uniquePrefix(name: string): string {
  return `test-${name}-${randomUUID().slice(0, 8)}`;
}

/**
 * Makes projection stores on the run's Redis, each under a prefix of its own (`name` and a
 * random part); their one client closes after the calling file's tests.
 */
export function freshStores(name: string): () => ProjectionStore {
  const redis = new Redis(redisUrl());
  after(() => redis.quit());
  return () => new ProjectionStore(redis, uniquePrefix(name));
}
