// Runs a Lua script by SHA, loading it on first use or after a Redis restart (NOSCRIPT).

import { createHash } from 'node:crypto';
import type { RedisClient } from './client.ts';

export class RedisScript {
  readonly source: string;
  private readonly sha: string;

  constructor(source: string) {
    this.source = source;
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  async run(redis: RedisClient, keys: string[], args: (string | number)[]): Promise<unknown> {
    try {
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.includes('NOSCRIPT')) throw err;
      return await redis.eval(this.source, keys.length, ...keys, ...args);
    }
  }
}
