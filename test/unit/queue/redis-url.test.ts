import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import { ProjectionStore } from '../../../control-plane/projections/store.ts';
import { WriteRateLimiter } from '../../../control-plane/queue/rate-limiter.ts';
import { isReplicated, keyPrefix, keySlot } from '../../../lib/redis/client.ts';
import { parseRedisUrl, redact, RedisUrlError, withPasswords } from '../../../lib/redis/url.ts';

describe('parseRedisUrl', () => {
  it('passes redis:// and rediss:// URLs to ioredis as they are', () => {
    assert.deepEqual(parseRedisUrl('redis://:pw@h:6379/2'), {
      kind: 'single',
      url: 'redis://:pw@h:6379/2',
    });
    assert.equal(parseRedisUrl('rediss://h:6380').kind, 'single');
  });

  it('reads Sentinels, the master name, a password and a database', () => {
    assert.deepEqual(
      parseRedisUrl('redis+sentinel://:s%40cret@s0:26379,10.0.0.2:26380/mymaster?db=3'),
      {
        kind: 'sentinel',
        sentinels: [
          { host: 's0', port: 26379 },
          { host: '10.0.0.2', port: 26380 },
        ],
        name: 'mymaster',
        db: 3,
        password: 's@cret',
      },
    );
  });

  it('reads a separate Sentinel password', () => {
    const t = parseRedisUrl('redis+sentinel://s0:26379/m?sentinelPassword=x');
    assert.equal(t.kind === 'sentinel' && t.sentinelPassword, 'x');
  });

  it('defaults the port: 26379 for Sentinels, 6379 for Cluster nodes', () => {
    const sentinel = parseRedisUrl('redis+sentinel://s0,s1:26380/m');
    assert.deepEqual(sentinel.kind === 'sentinel' && sentinel.sentinels, [
      { host: 's0', port: 26379 },
      { host: 's1', port: 26380 },
    ]);
    const cluster = parseRedisUrl('redis+cluster://n0');
    assert.deepEqual(cluster.kind === 'cluster' && cluster.nodes, [{ host: 'n0', port: 6379 }]);
  });

  it('reads Cluster seeds, IPv6 included', () => {
    assert.deepEqual(parseRedisUrl('redis+cluster://user:pw@[::1]:7000,n1:7001'), {
      kind: 'cluster',
      nodes: [
        { host: '::1', port: 7000 },
        { host: 'n1', port: 7001 },
      ],
      username: 'user',
      password: 'pw',
    });
  });

  it('speaks TLS to the Sentinels and the primary, or to every Cluster node, with rediss', () => {
    assert.deepEqual(parseRedisUrl('rediss+sentinel://:pw@s0,s1/m?db=2&caFile=/etc/ca/ca.pem'), {
      kind: 'sentinel',
      sentinels: [
        { host: 's0', port: 26379 },
        { host: 's1', port: 26379 },
      ],
      name: 'm',
      db: 2,
      password: 'pw',
      tls: true,
      caFile: '/etc/ca/ca.pem',
    });
    assert.deepEqual(parseRedisUrl('rediss+cluster://n0:7000,n1:7001'), {
      kind: 'cluster',
      nodes: [
        { host: 'n0', port: 7000 },
        { host: 'n1', port: 7001 },
      ],
      tls: true,
    });
    const plain = parseRedisUrl('redis+cluster://n0');
    assert.equal(plain.kind === 'cluster' && plain.tls, undefined, 'redis+cluster: no TLS');
  });

  it('takes a CA file for rediss:// and hands ioredis the URL without it', () => {
    assert.deepEqual(parseRedisUrl('rediss://:pw@h:6380/1?caFile=%2Fca%20dir%2Fca.pem'), {
      kind: 'single',
      url: 'rediss://:pw@h:6380/1',
      caFile: '/ca dir/ca.pem',
    });
    assert.deepEqual(parseRedisUrl('rediss://h?family=6&caFile=/ca.pem'), {
      kind: 'single',
      url: 'rediss://h?family=6',
      caFile: '/ca.pem',
    });
    assert.throws(
      () => parseRedisUrl('redis://:secret@h?caFile=/ca.pem'),
      (err: Error) => {
        assert.match(err.message, /start the URL with rediss/);
        assert.doesNotMatch(err.message, /secret/);
        return true;
      },
    );
  });

  it('refuses what it cannot use, saying which forms exist and hiding the password', () => {
    for (const bad of [
      'http://h:6379',
      'localhost:6379',
      'redis+sentinel://:pw@s0:26379',
      'redis+sentinel://:pw@s0:26379/m?db=x',
      'redis+sentinel://s0:26379/m?dbb=1',
      'redis+sentinel:///m',
      'redis+sentinel://s0,,s1/m',
      'rediss+sentinel://s0:26379/m?db=1&ssl=1',
      'redis+sentinel://s0:26379/m?caFile=/ca.pem',
      'redis://h:6379?caFile=/ca.pem',
      'rediss://h:6379?caFile=',
      'rediss+cluster://n0?caFile=',
      'redis+cluster://n0:7000/1',
      'redis+cluster://n0:99999',
      'redis+cluster://n0:7000?db=1',
    ]) {
      assert.throws(() => parseRedisUrl(bad), RedisUrlError, bad);
    }
    assert.throws(() => parseRedisUrl('localhost:6379'), /must start with redis:\/\//);
    assert.throws(
      () => parseRedisUrl('redis+sentinel://:topsecret@s0:26379'),
      (err: Error) => {
        assert.doesNotMatch(err.message, /topsecret/);
        assert.match(err.message, /master name/);
        return true;
      },
    );
    assert.equal(redact('redis+cluster://u:p@n:1'), 'redis+cluster://u:***@n:1');
    assert.equal(
      redact('redis+sentinel://s:1/m?sentinelPassword=p&db=1'),
      'redis+sentinel://s:1/m?sentinelPassword=***&db=1',
    );
  });
});

describe('withPasswords (REDIS_PASSWORD, REDIS_SENTINEL_PASSWORD)', () => {
  const odd = 'p@ss:w/rd?#%41+ ';

  it('puts the password in every form, percent-encoded, after the user if any', () => {
    for (const [url, want] of [
      ['redis://h:6379/2', 'redis://:ENC@h:6379/2'],
      ['rediss://user@h:6380', 'rediss://user:ENC@h:6380'],
      ['redis://user:@h', 'redis://user:ENC@h'],
      ['redis+sentinel://s0,s1/m?db=1', 'redis+sentinel://:ENC@s0,s1/m?db=1'],
      ['rediss+cluster://n0:7000', 'rediss+cluster://:ENC@n0:7000'],
    ] as const)
      assert.equal(
        withPasswords(url, { password: odd }),
        want.replace('ENC', encodeURIComponent(odd)),
      );
    const sentinel = parseRedisUrl(
      withPasswords('redis+sentinel://s0/m?db=1', { password: odd, sentinelPassword: odd }),
    );
    assert.equal(sentinel.kind === 'sentinel' && sentinel.password, odd);
    assert.equal(sentinel.kind === 'sentinel' && sentinel.sentinelPassword, odd);
    assert.equal(sentinel.kind === 'sentinel' && sentinel.db, 1);
    const single = parseRedisUrl(withPasswords('redis://h', { password: odd }));
    assert.equal(
      decodeURIComponent(new URL(single.kind === 'single' ? single.url : '').password),
      odd,
      'ioredis decodes it back',
    );
  });

  it('leaves the URL alone without passwords', () => {
    for (const url of ['redis://:pw@h', 'redis+sentinel://s0/m?sentinelPassword=x'])
      assert.equal(withPasswords(url, { password: undefined, sentinelPassword: '' }), url);
  });

  it('refuses a password given twice, or a Sentinel password without Sentinels, hiding both', () => {
    for (const [url, given, message] of [
      [
        'redis://:inurl@h',
        { password: 'inenv' },
        /given twice, in --redis-url and in REDIS_PASSWORD/,
      ],
      [
        'redis+sentinel://s0/m?sentinelPassword=inurl',
        { sentinelPassword: 'inenv' },
        /Sentinels' password is given twice/,
      ],
      ['redis://h', { sentinelPassword: 'inenv' }, /must then be a redis\+sentinel:\/\/ URL/],
    ] as const)
      assert.throws(
        () => withPasswords(url, given),
        (err: Error) => {
          assert.ok(err instanceof RedisUrlError);
          assert.match(err.message, message);
          assert.doesNotMatch(err.message, /inurl|inenv/);
          return true;
        },
      );
  });
});

describe('key names per topology', () => {
  it('computes Cluster slots as Redis does (CRC16 XMODEM of the hash tag)', () => {
    assert.equal(keySlot('123456789'), 0x31c3 % 16384);
    assert.equal(keySlot('{rollcall}:reconcile:wait'), keySlot('{rollcall}:proj:synced'));
    assert.equal(keySlot('{rollcall}:x'), keySlot('rollcall'));
    assert.notEqual(keySlot('rollcall:reconcile:wait'), keySlot('rollcall:proj:synced'));
  });

  it('keeps the plain prefix on one Redis and makes it a hash tag on a Cluster', () => {
    const single = new Redis({ lazyConnect: true });
    const sentinel = new Redis({
      lazyConnect: true,
      sentinels: [{ host: 'x', port: 1 }],
      name: 'm',
    });
    const cluster = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
    assert.equal(keyPrefix(single), 'rollcall');
    assert.equal(keyPrefix(sentinel, 'test-a'), 'test-a');
    assert.equal(keyPrefix(cluster), '{rollcall}');
    assert.equal(keyPrefix(cluster, 'test-a'), '{test-a}');
    assert.equal(keyPrefix(cluster, '{given}'), '{given}');
    assert.deepEqual([single, sentinel, cluster].map(isReplicated), [false, true, true]);
    // On one Redis the keys keep their names; on a Cluster the queue, the projections and the
    // write bucket share one slot, so every MULTI and script over them is legal there.
    assert.equal(new WriteRateLimiter(single).opts.key, 'rollcall:ratelimit:kube-writes');
    assert.equal(new ProjectionStore(single).syncedKey, 'rollcall:proj:synced');
    const limiter = new WriteRateLimiter(cluster).opts.key;
    const clusterKeys = [
      limiter,
      `${limiter}:paused`,
      new ProjectionStore(cluster).syncedKey,
      `${keyPrefix(cluster)}:reconcile:wait`,
    ];
    assert.deepEqual(new Set(clusterKeys.map(keySlot)).size, 1, clusterKeys.join(' '));
    single.disconnect();
    sentinel.disconnect();
    cluster.disconnect();
  });
});
