// /readyz of a real `rollcall run` process: not ready while its informers have not synced,
// ready once they have, not ready while Redis is away, ready again when it is back; and a
// clean, prompt exit on SIGTERM.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { HoldingProxy } from '../../support/holding-proxy.ts';
import { testKubeConfig } from '../../support/kube.ts';
import { get, waitFor, waitForStatus } from '../../support/poll.ts';
import { PrivateRedis } from '../../support/private-redis.ts';
import { startServing, type ServingRollcall } from '../../support/rollcall.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-ops-readyz';
let proxy: HoldingProxy;
let redis: PrivateRedis;
let rollcall: ServingRollcall;
let readyz: string;

before(async () => {
  proxy = await HoldingProxy.start(kc, '/apis/rollcall.dev/v1alpha1/policies');
  const tmp = mkdtempSync(join(tmpdir(), 'rollcall-ops-'));
  redis = new PrivateRedis(join(tmp, 'redis'));
  await redis.start();
  const kubeconfig = proxy.writeKubeconfig(join(tmp, 'kubeconfig'));
  rollcall = await startServing('ops-readyz', 'run', namespace, ['--kubeconfig', kubeconfig], {
    REDIS_URL: redis.url,
  });
  readyz = rollcall.url('/readyz');
});

after(async () => {
  await rollcall?.kill();
  await redis?.kill();
  await proxy?.close();
});

test('a leading watcher whose informers have not synced is not ready, and says why', async () => {
  const res = await waitFor(
    async () => {
      const r = await get(readyz);
      return r?.body.includes('not synced') ? r : undefined;
    },
    30_000,
    'the watcher to lead with its Policy list held back',
  );
  assert.equal(res.status, 503);
  // Still not ready a moment later: nothing but the held list stands in the way.
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal((await get(readyz))?.status, 503);
});

test('once the informers have synced and Redis answers, it is ready', async () => {
  proxy.release();
  const res = await waitForStatus(readyz, 200, 20_000, '/readyz 200');
  assert.match(res.body, /informers synced/);
});

test('with Redis stopped it is not ready (and still alive); with Redis back, ready again', async () => {
  await redis.kill();
  const down = await waitForStatus(readyz, 503, 15_000, '/readyz 503 without Redis');
  assert.match(down.body, /Redis/);
  assert.equal((await get(readyz.replace('readyz', 'healthz')))?.status, 200);
  await redis.start();
  await waitForStatus(readyz, 200, 30_000, '/readyz 200 once Redis is back');
});

test('SIGTERM: rollcall run exits 0, promptly', async () => {
  const started = Date.now();
  await rollcall.stop();
  const took = Date.now() - started;
  assert.equal(rollcall.child.exitCode, 0);
  assert.ok(took < 10_000, `took ${took} ms`);
});
