// The HTTPS listener in-process: probes, the body cap, metrics, and a certificate swapped the
// way Kubernetes updates a Secret volume (a new `..data` symlink), picked up without a restart;
// and in a process of its own, connections handed over on its IPC channel.
import assert from 'node:assert/strict';
import { fork, type ChildProcess } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { Agent } from 'node:https';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import { ensurePki, issueCertificate } from '../../../cluster/pki.ts';
import {
  handover,
  startHttpsServer,
  type PolicyHttpsServer,
} from '../../../policy-server/https-server.ts';
import { PolicyServerMetrics } from '../../../policy-server/metrics.ts';
import { TlsReloader } from '../../../policy-server/tls.ts';
import { callLocal, httpsRequest } from '../../support/https.ts';
import { loadedTarget, slowServerOptions } from './fixtures/slow-server.ts';

/** Resolves when `child` sends `message` (listen before causing it). */
function said(child: ChildProcess, message: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: unknown) => {
      if (m !== message) return;
      child.off('message', onMessage);
      resolve();
    };
    child.on('message', onMessage);
    child.once('exit', (code) => reject(new Error(`exited (${code}) before saying ${message}`)));
  });
}

describe('the HTTPS server', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rollcall-ps-tls-'));
  const pki = ensurePki(join(dir, 'pki'));
  const ca = readFileSync(pki.caCert);
  const tlsDir = join(dir, 'tls');
  let server: PolicyHttpsServer;
  let reloader: TlsReloader;
  let ready = false;
  const reloads: string[] = [];
  const metrics = new PolicyServerMetrics();

  /** Writes a fresh certificate as a new timestamped dir and swaps `..data` to it, as the kubelet does. */
  const rotate = (n: number) => {
    const { cert, key } = issueCertificate(pki.dir, `serving-${n}`, 'policy-server', [
      'IP:127.0.0.1',
    ]);
    const version = join(tlsDir, `..v${n}`);
    mkdirSync(version, { recursive: true });
    writeFileSync(join(version, 'tls.crt'), readFileSync(cert));
    writeFileSync(join(version, 'tls.key'), readFileSync(key));
    symlinkSync(`..v${n}`, join(tlsDir, '..data_tmp'));
    renameSync(join(tlsDir, '..data_tmp'), join(tlsDir, '..data'));
    return new X509Certificate(readFileSync(cert)).fingerprint256;
  };

  before(async () => {
    mkdirSync(tlsDir, { recursive: true });
    rotate(1);
    symlinkSync('..data/tls.crt', join(tlsDir, 'tls.crt'));
    symlinkSync('..data/tls.key', join(tlsDir, 'tls.key'));
    server = await startHttpsServer({
      port: 0,
      address: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      metrics,
      readiness: () =>
        ready
          ? { ready: true, detail: 'all loaded' }
          : { ready: false, detail: 'loading p generation 1' },
      admission: {
        target: loadedTarget,
        evaluate: async () => ({ kind: 'verdict', verdict: { allowed: false, message: 'nope' } }),
      },
    });
    reloader = new TlsReloader({
      dir: tlsDir,
      intervalMs: 60_000, // the directory watch must do it
      onChange: (pair) => {
        server.setCertificate(pair);
        reloads.push(new X509Certificate(pair.cert).fingerprint256);
      },
    });
    await reloader.start();
  });
  after(async () => {
    reloader.stop();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('/healthz answers; /readyz is 503 with what it waits for, then 200', async () => {
    assert.equal((await callLocal(server.port, ca, 'GET', '/healthz')).status, 200);
    const waiting = await callLocal(server.port, ca, 'GET', '/readyz');
    assert.deepEqual([waiting.status, waiting.body], [503, 'not ready: loading p generation 1\n']);
    ready = true;
    assert.equal((await callLocal(server.port, ca, 'GET', '/readyz')).status, 200);
  });

  test('answers an AdmissionReview and counts it by policy, generation and verdict', async () => {
    const review = JSON.stringify({
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: { uid: 'r' },
    });
    const res = await callLocal(server.port, ca, 'POST', '/validate/p/1', review);
    assert.equal(res.status, 200);
    assert.equal(JSON.parse(res.body).response.status.message, 'nope');
    const text = (await callLocal(server.port, ca, 'GET', '/metrics')).body;
    assert.match(
      text,
      /rollcall_admission_requests_total\{policy="p",generation="1",verdict="denied"\} 1/,
    );
    assert.match(text, /rollcall_admission_duration_seconds_count\{policy="p",path="pool"\} 1/);
  });

  test('refuses a body over 3 MiB with 413', async () => {
    const res = await callLocal(
      server.port,
      ca,
      'POST',
      '/validate/p/1',
      Buffer.alloc(3 * 1024 * 1024 + 1, 0x20),
    );
    assert.equal(res.status, 413);
  });

  test('a wrong path or method says what it expects', async () => {
    assert.equal((await callLocal(server.port, ca, 'POST', '/validate/p', '{}')).status, 404);
    assert.equal((await callLocal(server.port, ca, 'GET', '/validate/p/1')).status, 405);
  });

  test('keeps an idle connection past Node’s 5 s default, as the apiserver keeps its own for 90 s', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    let connections = 0;
    const count = () => connections++;
    server.server.on('secureConnection', count);
    try {
      const get = () =>
        httpsRequest({ host: '127.0.0.1', port: server.port, ca, path: '/healthz', agent });
      await get();
      await new Promise((r) => setTimeout(r, 7_000)); // past the default and its grace
      await get();
      assert.equal(connections, 1, 'the second request reused the idle connection');
    } finally {
      server.server.off('secureConnection', count);
      agent.destroy();
    }
  });

  test('on close, a request in flight still gets its answer', async () => {
    const slow = await startHttpsServer(slowServerOptions());
    slow.setCertificate({
      cert: readFileSync(join(tlsDir, 'tls.crt')),
      key: readFileSync(join(tlsDir, 'tls.key')),
    });
    const review = JSON.stringify({
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: { uid: 'r' },
    });
    const answer = callLocal(slow.port, ca, 'POST', '/validate/p/1', review);
    await new Promise((r) => setTimeout(r, 100));
    const closed = slow.close();
    assert.equal((await answer).status, 200);
    await closed;
  });

  test('takes connections handed over on its IPC channel, and on close answers their requests in flight first', async () => {
    const child = fork(
      join(import.meta.dirname, 'fixtures', 'handover-server.ts'),
      [join(tlsDir, 'tls.crt'), join(tlsDir, 'tls.key')],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
    );
    const socketPath = join(dir, 'handover.sock');
    // As the node agent does: nothing is read here, the process gets the socket as it came.
    const parent = createNetServer({ pauseOnConnect: true }, (socket) =>
      child.send(handover.connection, socket),
    );
    try {
      const announced = said(child, handover.ready);
      await said(child, 'certificate set');
      await announced;
      await new Promise<void>((resolve) => parent.listen(socketPath, resolve));
      const order: string[] = [];
      const evaluating = said(child, 'evaluating');
      const answer = httpsRequest(
        {
          socketPath,
          method: 'POST',
          path: '/validate/p/1',
          ca,
          checkServerIdentity: () => undefined, // the certificate names 127.0.0.1, not a socket
          agent: false,
        },
        JSON.stringify({
          apiVersion: 'admission.k8s.io/v1',
          kind: 'AdmissionReview',
          request: { uid: 'r' },
        }),
      ).then((res) => (order.push('answered'), res));
      await evaluating;
      const closed = said(child, 'closed').then(() => order.push('closed'));
      child.send('close');
      const [res] = await Promise.all([answer, closed]);
      assert.equal(res.status, 200);
      assert.deepEqual(order, ['answered', 'closed']);
    } finally {
      parent.close();
      child.kill();
    }
  });

  test('serves a rotated certificate without a restart', async () => {
    const before = (await callLocal(server.port, ca, 'GET', '/healthz')).fingerprint;
    assert.equal(before, reloads[0]);
    const next = rotate(2);
    const deadline = Date.now() + 5000;
    while (reloads.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(reloads.at(-1), next);
    assert.equal((await callLocal(server.port, ca, 'GET', '/healthz')).fingerprint, next);
  });
});
