import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Hono } from 'hono';
import {
  isLoopback,
  isSameOrigin,
  uiGuard,
  type UiAccess,
} from '../../../control-plane/http/auth.ts';
import { createApp } from '../../../control-plane/http/http.ts';
import { pino } from 'pino';
import { Registry } from 'prom-client';

const basic = (u: string) => ({ authorization: `Basic ${Buffer.from(u).toString('base64')}` });

function appWith(access: UiAccess): Hono {
  return createApp({
    registry: new Registry(),
    logger: pino({ level: 'silent' }),
    ready: async () => ({ ready: true, detail: 'test' }),
    extend: (app) => {
      app.use('/queues/*', uiGuard(access));
      app.get('/queues/x', (c) => c.text('ui'));
      app.put('/queues/x', (c) => c.text('done'));
    },
  });
}

describe('the UI guard', () => {
  const withCreds: UiAccess = { credentials: 'admin:s3:cret', localOnly: false, readOnly: true };

  test('refuses without credentials and asks for them', async () => {
    const res = await appWith(withCreds).request('/queues/x');
    assert.equal(res.status, 401);
    assert.match(res.headers.get('www-authenticate') ?? '', /Basic/);
  });

  test('refuses wrong credentials and accepts the right ones (passwords may contain colons)', async () => {
    assert.equal(
      (await appWith(withCreds).request('/queues/x', { headers: basic('admin:nope') })).status,
      401,
    );
    const ok = await appWith(withCreds).request('/queues/x', { headers: basic('admin:s3:cret') });
    assert.equal(ok.status, 200);
    assert.equal(await ok.text(), 'ui');
  });

  test('is read-only by default: writes get 405 even with credentials', async () => {
    const res = await appWith(withCreds).request('/queues/x', {
      method: 'PUT',
      headers: { ...basic('admin:s3:cret'), origin: 'http://localhost' },
    });
    assert.equal(res.status, 405);
  });

  test('with actions allowed, writes need a same-origin Origin (CSRF)', async () => {
    const app = appWith({ ...withCreds, readOnly: false });
    const put = (headers: Record<string, string>) =>
      app.request('http://localhost/queues/x', {
        method: 'PUT',
        headers: { ...basic('admin:s3:cret'), ...headers },
      });
    assert.equal((await put({})).status, 403);
    assert.equal((await put({ origin: 'http://evil.example' })).status, 403);
    assert.equal(
      (await put({ origin: 'http://localhost', 'sec-fetch-site': 'cross-site' })).status,
      403,
    );
    assert.equal(
      (await put({ origin: 'http://localhost', 'sec-fetch-site': 'same-origin' })).status,
      200,
    );
  });

  test('is off without credentials unless local-only, and says how to turn it on', async () => {
    const res = await appWith({ credentials: undefined, localOnly: false, readOnly: true }).request(
      '/queues/x',
    );
    assert.equal(res.status, 403);
    assert.match(await res.text(), /--ui-credentials/);
  });

  test('local-only refuses requests whose peer is not loopback', async () => {
    // app.request() has no socket, so the peer is unknown: refused.
    const res = await appWith({ credentials: undefined, localOnly: true, readOnly: true }).request(
      '/queues/x',
    );
    assert.equal(res.status, 403);
  });
});

test('loopback addresses are recognised in IPv4, IPv6 and mapped form', () => {
  for (const a of ['127.0.0.1', '127.1.2.3', '::1', '::ffff:127.0.0.1'])
    assert.ok(isLoopback(a), a);
  for (const a of ['10.0.0.1', '::ffff:10.0.0.1', '', undefined])
    assert.ok(!isLoopback(a), String(a));
});

test('same-origin: safe methods always pass; writes need a matching Origin', () => {
  assert.ok(isSameOrigin('GET', 'http://h:1/x', {}));
  assert.ok(!isSameOrigin('POST', 'http://h:1/x', {}));
  assert.ok(!isSameOrigin('POST', 'http://h:1/x', { origin: 'http://h:2' }));
  assert.ok(isSameOrigin('POST', 'http://h:1/x', { origin: 'http://h:1' }));
});

test('with the UIs off, / and /queues answer 403 with the reason while probes and metrics stay open', async () => {
  const { mountUis } = await import('../../../control-plane/http/ui.ts');
  const app = createApp({
    registry: new Registry(),
    logger: pino({ level: 'silent' }),
    ready: async () => ({ ready: true, detail: 'test' }),
    // The queue is never touched while the UIs are off.
    extend: (a) =>
      mountUis(a, {
        access: { credentials: undefined, localOnly: false, readOnly: true },
        queue: {} as never,
        store: undefined,
        logger: pino({ level: 'silent' }),
      }),
  });
  for (const path of ['/', '/queues', '/queues/api/queues'])
    assert.equal((await app.request(path)).status, 403, path);
  for (const path of ['/healthz', '/readyz', '/metrics'])
    assert.equal((await app.request(path)).status, 200, path);
});
