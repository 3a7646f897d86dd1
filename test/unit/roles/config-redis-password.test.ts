import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, test } from 'node:test';
import { ConfigError, configHelp, parseConfig } from '../../../control-plane/config.ts';
import { createLogger } from '../../../lib/logger.ts';
import { parseRedisUrl } from '../../../lib/redis/url.ts';

describe("Redis' passwords from the environment", () => {
  test('REDIS_PASSWORD reaches the URL every client is made from, whatever its characters', () => {
    const config = parseConfig([], { REDIS_URL: 'redis://redis:6379', REDIS_PASSWORD: 'a@b/c' });
    assert.equal(config.redisUrl, 'redis://:a%40b%2Fc@redis:6379');
  });

  test('REDIS_SENTINEL_PASSWORD is the Sentinels’, with a redis+sentinel:// URL only', () => {
    const env = {
      REDIS_URL: 'redis+sentinel://s0:26379,s1:26379/rollcall',
      REDIS_PASSWORD: 'redis-pw',
      REDIS_SENTINEL_PASSWORD: 'sentinel-pw',
    };
    const target = parseRedisUrl(parseConfig([], env).redisUrl);
    assert.equal(target.kind === 'sentinel' && target.password, 'redis-pw');
    assert.equal(target.kind === 'sentinel' && target.sentinelPassword, 'sentinel-pw');
    assert.throws(
      () => parseConfig([], { REDIS_URL: 'redis://r:6379', REDIS_SENTINEL_PASSWORD: 'x' }),
      (err: unknown) => err instanceof ConfigError && /redis\+sentinel:\/\//.test(err.message),
    );
  });

  test('a password in the URL and in REDIS_PASSWORD is refused without showing either', () => {
    assert.throws(
      () => parseConfig(['--redis-url', 'redis://:one@r:6379'], { REDIS_PASSWORD: 'two' }),
      (err: unknown) =>
        err instanceof ConfigError &&
        /given twice/.test(err.message) &&
        !/one|two/.test(err.message.replace(/given twice|keep one/g, '')),
    );
  });

  test('the log never shows it, and no flag takes it (argv is public)', () => {
    const config = parseConfig([], { REDIS_URL: 'redis://r:6379', REDIS_PASSWORD: 'hunter2' });
    let logged = '';
    const sink = new Writable({
      write: (chunk: Buffer, _encoding, done) => {
        logged += chunk.toString();
        done();
      },
    });
    createLogger('info', sink).info({ config }, 'configured');
    assert.match(logged, /configured/);
    assert.doesNotMatch(logged, /hunter2/);
    assert.doesNotMatch(configHelp, /--redis-password/);
    assert.throws(() => parseConfig(['--redis-password', 'x'], {}), ConfigError);
  });
});
