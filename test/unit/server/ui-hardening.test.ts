// The operator UIs refuse to be framed by other sites, and with --ui-local-only answer only to
// a loopback Host: a page whose name its attacker re-points at 127.0.0.1 (DNS rebinding) gets
// its requests through a real listener on loopback, and is still refused.
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { isLoopbackHost, type UiAccess } from '../../../control-plane/http/auth.ts';
import { createApp, startHttpServer, type HttpServer } from '../../../control-plane/http/http.ts';
import { mountUis } from '../../../control-plane/http/ui.ts';

const basic = { authorization: `Basic ${Buffer.from('admin:secret').toString('base64')}` };
const quiet = pino({ level: 'silent' });

/** The app every role serves, with the UIs mounted; the queue is never touched here. */
const appOptions = (access: UiAccess) => ({
  registry: new Registry(),
  logger: quiet,
  ready: async () => ({ ready: true, detail: 'test' }),
  extend: (app: Parameters<typeof mountUis>[0]) =>
    mountUis(app, {
      access,
      queue: { name: 'reconcile' } as never,
      store: { isSynced: async () => false } as never,
      logger: quiet,
    }),
});

describe('the UI headers', () => {
  const app = createApp(
    appOptions({ credentials: 'admin:secret', localOnly: false, readOnly: true }),
  );

  test('forbid framing and limit what the pages load, on pages and refusals alike', async () => {
    for (const [path, headers, status] of [
      ['/', basic, 503],
      ['/', {}, 401],
      ['/queues', {}, 401],
      ['/queues/api/queues', {}, 401],
    ] as const) {
      const res = await app.request(path, { headers });
      assert.equal(res.status, status, path);
      assert.equal(res.headers.get('x-frame-options'), 'DENY', path);
      const csp = res.headers.get('content-security-policy') ?? '';
      assert.match(csp, /frame-ancestors 'none'/, path);
      assert.match(csp, /script-src 'self'(;|$)/, path);
      assert.match(csp, /object-src 'none'/, path);
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff', path);
      assert.equal(res.headers.get('strict-transport-security'), null, path);
    }
  });

  test('leave the probes and /metrics alone', async () => {
    for (const path of ['/healthz', '/readyz', '/metrics'])
      assert.equal((await app.request(path)).headers.get('content-security-policy'), null, path);
  });
});

describe('--ui-local-only on a real listener', () => {
  let server: HttpServer;
  /** GET `path` from 127.0.0.1 with the given Host header. */
  const get = (path: string, host: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: server.port, path, headers: { host }, agent: false },
        (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += String(c)));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.end();
    });

  before(async () => {
    server = await startHttpServer({
      port: 0,
      hostname: '127.0.0.1',
      ...appOptions({ credentials: undefined, localOnly: true, readOnly: true }),
    });
  });
  after(() => server.close());

  test('refuses a loopback peer that names another host (DNS rebinding), saying where to browse', async () => {
    for (const host of [
      `rebind.example:${server.port}`,
      'rebind.example',
      `10.0.0.1:${server.port}`,
    ]) {
      const res = await get('/', host);
      assert.equal(res.status, 421, host);
      assert.match(
        res.body,
        /answer to localhost, 127\.0\.0\.1 or \[::1\] only \(--ui-local-only\)/,
      );
    }
    assert.equal((await get('/queues/api/queues', `rebind.example:${server.port}`)).status, 421);
  });

  test('serves a loopback Host, with or without its port', async () => {
    for (const host of [
      `localhost:${server.port}`,
      `127.0.0.1:${server.port}`,
      `[::1]:${server.port}`,
      'localhost',
    ])
      assert.equal((await get('/', host)).status, 503, host); // the page itself: projections not synced
  });

  test('keeps the probes reachable under any name (the kubelet probes the pod IP)', async () => {
    assert.equal((await get('/healthz', `10.0.0.1:${server.port}`)).status, 200);
  });
});

test('loopback hosts: localhost, 127/8 and [::1], with or without a port; nothing else', () => {
  for (const h of [
    'localhost',
    'LOCALHOST:80',
    '127.0.0.1',
    '127.1.2.3:8080',
    '[::1]',
    '[::1]:8080',
  ])
    assert.ok(isLoopbackHost(h), h);
  for (const h of [
    '',
    undefined,
    'localhost.evil.example',
    'evil.localhost.example:80',
    '127.0.0.1.nip.io',
    '128.0.0.1',
    '127.0.0.256',
    '[::2]',
    '0.0.0.0',
    '[::ffff:127.0.0.1]',
  ])
    assert.ok(!isLoopbackHost(h), String(h));
});
