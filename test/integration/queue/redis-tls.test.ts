// rollcall's Redis clients over TLS with a password: rediss:// to one Redis, and
// rediss+sentinel:// to a Sentinel and the primary it names (the Sentinel itself reaches Redis
// over TLS too), each checked against a private CA given as ?caFile=, which the system does not
// trust: without it the client refuses the server. Redis is Debian's redis-server, built with
// TLS. (A Cluster over TLS, rediss+cluster://, is the same ioredis option on every node:
// test/unit/queue/redis-url.test.ts reads the form.)
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect } from 'node:tls';
import type { RedisOptions } from 'ioredis';
import { createCa, issueServingCertificate } from '../../../lib/certs/index.ts';
import { createRedisClient } from '../../../lib/redis/client.ts';
import { freePort } from '../../../tooling/cluster/ports.ts';
import {
  ensureRedisSentinel,
  ensureRedisServer,
  stopChild,
} from '../../../tooling/cluster/redis.ts';
import { testCluster } from '../../support/kube.ts';

const PASSWORD = 'tls-test-password';
const dir = join(testCluster().dir, 'redis-tls');
const files = {
  ca: join(dir, 'ca.pem'),
  cert: join(dir, 'redis.pem'),
  key: join(dir, 'redis.key'),
};
const ports = { redis: 0, sentinel: 0 };
/** The private CA's certificate (PEM), which the system does not trust. */
let caPem = '';
const stops: (() => Promise<void>)[] = [];

/** TLS for a Redis or Sentinel process, both ways: as a server, and as a client of Redis. */
const tlsSettings = () => [
  ['tls-cert-file', files.cert],
  ['tls-key-file', files.key],
  ['tls-ca-cert-file', files.ca],
  ['tls-auth-clients', 'no'],
  ['bind', '127.0.0.1', '-::1'],
  ['port', '0'],
];

/** Resolves once the process answers a PING over TLS (checked against the CA). */
async function waitForTls(port: number, name: string, output: () => string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const answered = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: 'localhost', port, ca: [caPem] }, () =>
        socket.write('PING\r\n'),
      );
      socket.setTimeout(1000, () => (socket.destroy(), resolve(false)));
      socket.on('error', () => resolve(false));
      socket.on('data', () => (socket.destroy(), resolve(true)));
    });
    if (answered) return;
    if (Date.now() > deadline) assert.fail(`${name} does not answer over TLS: ${output()}`);
    await sleep(100);
  }
}

async function run(command: string, args: string[], port: number, name: string) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  stops.push(() => stopChild(child));
  await waitForTls(port, name, () => output.slice(-2000));
}

before(async () => {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const now = new Date();
  const ca = await createCa({ commonName: 'redis-tls-test', validityMs: 3_600_000, now });
  const serving = await issueServingCertificate({
    ca,
    dnsNames: ['localhost'],
    validityMs: 3_600_000,
    now,
  });
  caPem = ca.certPem;
  writeFileSync(files.ca, ca.certPem);
  writeFileSync(files.cert, serving.certPem);
  writeFileSync(files.key, serving.keyPem, { mode: 0o600 });

  ports.redis = await freePort();
  const redisArgs = [
    ...tlsSettings(),
    ['tls-port', String(ports.redis)],
    ['requirepass', PASSWORD],
    ['save', ''],
    ['appendonly', 'no'],
    ['dir', dir],
  ].flatMap(([flag, ...values]) => [`--${flag}`, ...values]);
  await run(await ensureRedisServer(), redisArgs, ports.redis, 'redis-server');

  ports.sentinel = await freePort();
  const conf = join(dir, 'sentinel.conf');
  writeFileSync(
    conf,
    [
      ...tlsSettings(),
      ['tls-port', String(ports.sentinel)],
      // The Sentinel reaches Redis over TLS too.
      ['tls-replication', 'yes'],
      ['requirepass', PASSWORD],
      ['dir', dir],
      ['sentinel', 'resolve-hostnames', 'yes'],
      ['sentinel', 'announce-hostnames', 'yes'],
      ['sentinel', 'monitor', 'rollcall', 'localhost', String(ports.redis), '1'],
      ['sentinel', 'auth-pass', 'rollcall', PASSWORD],
    ]
      .map((line) => line.join(' '))
      .join('\n') + '\n',
  );
  await run(await ensureRedisSentinel(), [conf], ports.sentinel, 'redis-sentinel');
});

after(async () => {
  await Promise.all(stops.map((stop) => stop()));
});

/** No retries: a refused server fails the connect at once. */
const options: RedisOptions = {
  lazyConnect: true,
  maxRetriesPerRequest: 0,
  retryStrategy: () => null,
  sentinelRetryStrategy: () => null,
};

/**
 * Connects with `url` and writes a key, closing the client in any case; a refused connection
 * rejects with the client's first error (the TLS one), not the "Connection is closed" after it.
 */
async function write(url: string, key: string): Promise<string> {
  const client = createRedisClient(url, options);
  const errors: Error[] = [];
  client.on('error', (err: Error) => errors.push(err));
  try {
    await client.connect();
    return await client.set(key, 'over TLS');
  } catch (err) {
    throw errors[0] ?? err;
  } finally {
    client.disconnect();
  }
}

describe('Redis over TLS', { timeout: 60_000 }, () => {
  test('rediss:// with ?caFile= writes to one Redis; without the CA the client refuses it', async () => {
    const url = `rediss://:${PASSWORD}@localhost:${ports.redis}`;
    assert.equal(await write(`${url}?caFile=${encodeURIComponent(files.ca)}`, 'single'), 'OK');
    await assert.rejects(write(url, 'untrusted'), /self-signed certificate in certificate chain/);
  });

  test('rediss+sentinel:// with ?caFile= finds the primary through the Sentinel and writes there, both over TLS', async () => {
    const url = `rediss+sentinel://:${PASSWORD}@localhost:${ports.sentinel}/rollcall?sentinelPassword=${PASSWORD}`;
    assert.equal(await write(`${url}&caFile=${encodeURIComponent(files.ca)}`, 'sentinel'), 'OK');
    const check = createRedisClient(
      `rediss://:${PASSWORD}@localhost:${ports.redis}?caFile=${encodeURIComponent(files.ca)}`,
      options,
    );
    await check.connect();
    assert.equal(await check.get('sentinel'), 'over TLS', 'on the primary');
    check.disconnect();
    // ioredis reports only that no Sentinel answered, the TLS error behind it lost.
    await assert.rejects(write(url, 'untrusted'), /All sentinels are unreachable/);
  });

  test('a CA file that is not there is named', () => {
    assert.throws(
      () =>
        createRedisClient(`rediss://localhost:${ports.redis}?caFile=/nonexistent/ca.pem`, options),
      /cannot read the CA file \?caFile=\/nonexistent\/ca\.pem/,
    );
  });
});
