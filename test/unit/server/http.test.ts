import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { createLogger } from '../../../lib/logger.ts';
import { readiness } from '../../../control-plane/roles.ts';
import { createApp, type Readiness } from '../../../control-plane/http/http.ts';

const app = (ready: () => Promise<Readiness>, readyTimeoutMs?: number) =>
  createApp({
    registry: new Registry(),
    logger: pino({ level: 'silent' }),
    ready,
    ...(readyTimeoutMs ? { readyTimeoutMs } : {}),
  });

test('/healthz answers while the process lives, whatever its dependencies do', async () => {
  const res = await app(async () => ({ ready: false, detail: 'x' })).request('/healthz');
  assert.equal(res.status, 200);
});

test('/readyz is 200 with the reason when ready, 503 when not, and 503 when the check hangs or throws', async () => {
  assert.equal(
    (await app(async () => ({ ready: true, detail: 'fine' })).request('/readyz')).status,
    200,
  );
  const no = await app(async () => ({ ready: false, detail: 'Redis does not answer' })).request(
    '/readyz',
  );
  assert.equal(no.status, 503);
  assert.match(await no.text(), /Redis does not answer/);
  const hung = await app(() => new Promise(() => {}), 50).request('/readyz');
  assert.equal(hung.status, 503);
  assert.match(await hung.text(), /took over 50 ms/);
  assert.equal(
    (await app(async () => Promise.reject(new Error('x'))).request('/readyz')).status,
    503,
  );
});

test('readiness per role: Redis must answer; a leading watcher must have synced; a standby must be able to read the Lease', async () => {
  const pong = async () => 'PONG';
  const down = async () => Promise.reject(new Error('Connection is closed.'));
  const watcher = (isLeader: boolean, isReady: boolean, leaseProblem?: string) => ({
    isLeader: () => isLeader,
    isReady: () => isReady,
    leaseProblem: () => leaseProblem,
  });
  assert.deepEqual(await readiness(pong, undefined), { ready: true, detail: 'Redis answers' });
  assert.equal((await readiness(down, undefined)).ready, false);
  assert.equal((await readiness(pong, watcher(true, false))).ready, false);
  assert.equal((await readiness(pong, watcher(true, true))).ready, true);
  assert.match((await readiness(pong, watcher(false, false))).detail, /standby/);
  assert.equal((await readiness(down, watcher(false, true))).ready, false);
  const unreachable = await readiness(pong, watcher(false, true, 'connect ECONNREFUSED'));
  assert.equal(unreachable.ready, false);
  assert.match(
    unreachable.detail,
    /standby watcher cannot check the leader Lease: connect ECONNREFUSED/,
  );
  // Sentinel and Cluster: the detail names the primary and the last failover, ready or not.
  const primary = () => 'primary 10.0.0.7:6379; 1 failover, last at 2026-12-01T20:35:20.169Z';
  assert.deepEqual(await readiness(pong, undefined, primary), {
    ready: true,
    detail: `Redis answers (Redis ${primary()})`,
  });
  assert.match((await readiness(down, undefined, primary)).detail, /does not answer.*10\.0\.0\.7/);
});

test('the logger censors credentials wherever they appear', () => {
  const lines: string[] = [];
  const sink = new Writable({ write: (chunk, _enc, done) => (lines.push(String(chunk)), done()) });
  const logger = createLogger('info', sink);
  logger.info(
    {
      config: { uiCredentials: 'admin:secret', redisUrl: 'redis://:pw@h' },
      req: { headers: { authorization: 'Basic abc' } },
      token: 't',
    },
    'x',
  );
  const out = lines.join('');
  for (const secret of ['admin:secret', ':pw@', 'Basic abc', '"t"'])
    assert.ok(!out.includes(secret), `${secret} leaked: ${out}`);
  assert.match(out, /\[redacted\]/);
});
