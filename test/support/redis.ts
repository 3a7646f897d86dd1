// Integration tests get their Redis from the test runner (one per `npm test` run).

import { randomUUID } from 'node:crypto';

export function redisUrl(): string {
  const url = process.env.REDIS_URL;
  if (!url) throw new Error('integration tests need REDIS_URL; run them with `npm test`');
  return url;
}

/** A Redis key prefix no other test uses, so tests can share one Redis. */
export function uniquePrefix(name: string): string {
  return `test-${name}-${randomUUID().slice(0, 8)}`;
}
