// The HTTPS listener in-process: probes, the body cap, metrics, the limits on the way in, and
// a certificate swapped the way Kubernetes updates a Secret volume (a new `..data` symlink),
// picked up without a restart; and in a process of its own, connections handed over on its
// IPC channel, under the same limits.
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
import { connect as connectNet, createServer as createNetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { connect as connectTls } from 'node:tls';
import { pino } from 'pino';
import { ensurePki, issueCertificate } from '../../../tooling/cluster/pki.ts';
import {
  handover,
  startHttpsServer,
  type HttpsServerOptions,
  type IngressLimits,
  type PolicyHttpsServer,
} from '../../../data-plane/https-server.ts';
import { PolicyServerMetrics } from '../../../data-plane/metrics.ts';
import { TlsReloader } from '../../../data-plane/tls.ts';
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

const reviewOf = (uid: string, padding = 0) =>
  JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid, object: { data: { blob: 'x'.repeat(padding) } } },
  });

/** An audit batch of `count` ConfigMaps, each judged by policy p generation 1. */
const auditBatchOf = (count: number, padding = 0) =>
  JSON.stringify({
    resource: { group: '', version: 'v1', resource: 'configmaps' },
    kind: { group: '', version: 'v1', kind: 'ConfigMap' },
    policies: [{ name: 'p', generation: 1 }],
    items: Array.from({ length: count }, (_, i) => ({
      object: {
        metadata: { name: `cm-${i}`, namespace: 'a' },
        data: { blob: 'x'.repeat(padding) },
      },
      policies: [0],
    })),
  });

/** Milliseconds until `socket` closes. */
function closed(socket: Socket, since = performance.now()): Promise<number> {
  socket.on('error', () => {});
  return new Promise((resolve) => socket.once('close', () => resolve(performance.now() - since)));
}

async function until(condition: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
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

  test('accepts a 7 MiB AdmissionReview and refuses a 9 MiB one with 413, saying the limit', async () => {
    const MiB = 1024 * 1024;
    const validate = (review: string) =>
      callLocal(server.port, ca, 'POST', '/validate/p/1', review);
    const accepted = await validate(reviewOf('big', 7 * MiB));
    assert.equal(accepted.status, 200);
    assert.equal(JSON.parse(accepted.body).response.uid, 'big');
    const refused = await validate(reviewOf('huge', 9 * MiB));
    assert.deepEqual(
      [refused.status, JSON.parse(refused.body)],
      [413, { error: 'an AdmissionReview may be at most 8388608 bytes (--max-review-bytes)' }],
    );
    const text = (await callLocal(server.port, ca, 'GET', '/metrics')).body;
    assert.match(text, /rollcall_admission_refused_total\{reason="too_large"\} 1/);
  });

  test("judges an audit batch through admission's path and counts each evaluation by policy", async () => {
    const res = await callLocal(server.port, ca, 'POST', '/audit', auditBatchOf(2));
    assert.equal(res.status, 200, res.body);
    assert.deepEqual(JSON.parse(res.body), {
      results: [[{ result: 'fail', message: 'nope' }], [{ result: 'fail', message: 'nope' }]],
    });
    const text = (await callLocal(server.port, ca, 'GET', '/metrics')).body;
    assert.match(text, /rollcall_policy_server_audit_evaluations_total\{policy="p"\} 2/);
    const bad = await callLocal(server.port, ca, 'POST', '/audit', '{"items":[]}');
    assert.equal(bad.status, 400);
    assert.match(JSON.parse(bad.body).error, /^not an audit batch: /);
    const tooLarge = await callLocal(
      server.port,
      ca,
      'POST',
      '/audit',
      auditBatchOf(1, 9 * 1024 * 1024),
    );
    assert.deepEqual(
      [tooLarge.status, JSON.parse(tooLarge.body)],
      [413, { error: 'an audit batch may be at most 8388608 bytes (--max-review-bytes)' }],
    );
  });

  /** A server of its own with `limits`, whose evaluations wait until `release()`. */
  async function limitedServer(limits: Partial<IngressLimits>) {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const state = { evaluating: 0 };
    const options: HttpsServerOptions = {
      port: 0,
      address: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      metrics: new PolicyServerMetrics(),
      readiness: () => ({ ready: true, detail: '' }),
      limits,
      admission: {
        // Policies named ignored-* have failurePolicy Ignore, the others Fail.
        target: (policy) => {
          const target = loadedTarget();
          const failurePolicy = policy.startsWith('ignored') ? 'Ignore' : 'Fail';
          return { ...target, spec: { ...(target.spec as object), failurePolicy } as never };
        },
        evaluate: async () => {
          state.evaluating++;
          await released;
          return { kind: 'verdict', verdict: { allowed: true } };
        },
      },
    };
    const limited = await startHttpsServer(options);
    limited.setCertificate({
      cert: readFileSync(join(tlsDir, 'tls.crt')),
      key: readFileSync(join(tlsDir, 'tls.key')),
    });
    const post = (policy: string, uid = policy) =>
      callLocal(limited.port, ca, 'POST', `/validate/${policy}/1`, reviewOf(uid));
    const metrics = async () => (await callLocal(limited.port, ca, 'GET', '/metrics')).body;
    return { limited, state, release, post, metrics };
  }

  test('past --max-in-flight, a request is answered at once by its policy’s failurePolicy, saying the server is overloaded', async () => {
    const { limited, state, release, post, metrics } = await limitedServer({ maxInFlight: 4 });
    try {
      const held = [post('p', 'p1'), post('p', 'p2'), post('q', 'q1'), post('q', 'q2')];
      await until(() => state.evaluating === 4, 'four requests evaluating');
      const started = performance.now();
      const [denied, allowed] = await Promise.all([post('r'), post('ignored-s')]);
      assert.ok(performance.now() - started < 1000, 'answered without waiting for a slot');
      assert.equal(state.evaluating, 4, 'neither was evaluated');
      assert.equal(denied.status, 200);
      assert.deepEqual(JSON.parse(denied.body).response, {
        uid: 'r',
        allowed: false,
        status: {
          code: 500,
          reason: 'InternalError',
          message: 'policy r: policy server overloaded: 4 requests in flight (limit 4)',
        },
      });
      assert.deepEqual(JSON.parse(allowed.body).response, {
        uid: 'ignored-s',
        allowed: true,
        warnings: [
          'policy ignored-s: policy server overloaded: 4 requests in flight (limit 4) (failurePolicy Ignore: allowed)',
        ],
      });
      const during = await metrics();
      assert.match(during, /rollcall_admission_requests_in_flight 4/);
      assert.match(during, /rollcall_admission_refused_total\{reason="overloaded"\} 2/);
      assert.match(
        during,
        /rollcall_admission_requests_total\{policy="r",generation="1",verdict="error"\} 1/,
      );
      release();
      for (const res of await Promise.all(held))
        assert.equal(JSON.parse(res.body).response.allowed, true);
      assert.match(await metrics(), /rollcall_admission_requests_in_flight 0/);
    } finally {
      release();
      await limited.close();
    }
  });

  test('one policy holds at most half of --max-in-flight, so the others’ requests are still evaluated', async () => {
    const { limited, state, release, post } = await limitedServer({ maxInFlight: 4 });
    try {
      const held = [post('p', 'p1'), post('p', 'p2')];
      await until(() => state.evaluating === 2, 'two requests of p evaluating');
      const third = await post('p', 'p3');
      assert.equal(
        JSON.parse(third.body).response.status.message,
        'policy p: policy server overloaded: 2 requests of this policy in flight (limit 2, half of 4)',
      );
      held.push(post('q'));
      await until(() => state.evaluating === 3, 'q evaluated beside p');
      release();
      assert.deepEqual(
        (await Promise.all(held)).map((res) => JSON.parse(res.body).response.allowed),
        [true, true, true],
      );
    } finally {
      release();
      await limited.close();
    }
  });

  test('the audit waits for admission: with a quarter of --max-in-flight taken, a batch is answered retry, unevaluated', async () => {
    const { limited, state, release, post } = await limitedServer({ maxInFlight: 4 });
    const audit = (body: string) => callLocal(limited.port, ca, 'POST', '/audit', body);
    try {
      const held = post('p');
      await until(() => state.evaluating === 1, 'one admission request evaluating');
      const res = await audit(auditBatchOf(3));
      assert.equal(res.status, 200);
      const results = JSON.parse(res.body).results as {
        result: string;
        retry?: boolean;
        message?: string;
      }[][];
      assert.deepEqual(
        results.map(([r]) => [r?.result, r?.retry]),
        [
          ['error', true],
          ['error', true],
          ['error', true],
        ],
      );
      assert.match(
        results[0]?.[0]?.message ?? '',
        /policy server busy: 1 requests in flight \(the audit waits for fewer than 1\)/,
      );
      assert.equal(state.evaluating, 1, 'the audit evaluated nothing');
      release();
      await held;
      assert.equal((await audit(auditBatchOf(1))).status, 200);
      assert.equal(state.evaluating, 2, 'evaluated once admission left room');
    } finally {
      release();
      await limited.close();
    }
  });

  test('one audit batch is judged at a time; four wait, and one more is refused with 503', async () => {
    const { limited, state, release } = await limitedServer({});
    const audit = () => callLocal(limited.port, ca, 'POST', '/audit', auditBatchOf(1));
    try {
      const first = audit();
      await until(() => state.evaluating === 1, 'the first batch evaluating');
      const waiting = [audit(), audit(), audit(), audit()];
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(state.evaluating, 1, 'the waiting batches evaluate nothing yet');
      const refused = await audit();
      assert.equal(refused.status, 503);
      assert.equal(refused.headers['retry-after'], '5');
      assert.match(JSON.parse(refused.body).error, /busy: other audit batches/);
      release();
      for (const res of await Promise.all([first, ...waiting])) assert.equal(res.status, 200);
      assert.equal(state.evaluating, 5);
    } finally {
      release();
      await limited.close();
    }
  });

  test('connections past --max-connections are closed before their TLS handshake, and counted', async () => {
    const { limited, release, metrics } = await limitedServer({ maxConnections: 2 });
    const open = () => {
      const socket = connectTls({ host: '127.0.0.1', port: limited.port, ca });
      const secure = new Promise<boolean>((resolve) => {
        socket.once('secureConnect', () => resolve(true));
        socket.once('close', () => resolve(false));
      });
      socket.on('error', () => {});
      return { socket, secure };
    };
    const kept = [open(), open()];
    try {
      assert.deepEqual(await Promise.all(kept.map((c) => c.secure)), [true, true]);
      const refused = open();
      assert.equal(await refused.secure, false, 'the third connection is closed unanswered');
      // Once one closes, a new connection gets its slot (as soon as the server saw the close).
      kept[0]!.socket.destroy();
      let text: string | undefined;
      const deadline = Date.now() + 5000;
      while (text === undefined && Date.now() < deadline)
        text = await metrics().catch(
          () => new Promise<undefined>((r) => setTimeout(() => r(undefined), 20)),
        );
      assert.ok(text, 'a connection is taken again');
      assert.match(text, /rollcall_open_connections 2/);
      assert.match(text, /rollcall_connections_refused_total [1-9]/);
    } finally {
      for (const c of kept) c.socket.destroy();
      release();
      await limited.close();
    }
  });

  test('a client that connects and never finishes its TLS handshake is dropped after --tls-handshake-timeout-seconds', async () => {
    const { limited, release, metrics } = await limitedServer({ tlsHandshakeTimeoutMs: 1000 });
    try {
      const silent = connectNet({ host: '127.0.0.1', port: limited.port });
      const ms = await closed(silent);
      assert.ok(ms >= 900 && ms < 3000, `dropped after ${Math.round(ms)} ms`);
      assert.match(await metrics(), /rollcall_tls_handshake_failures_total\{reason="timeout"\} 1/);
    } finally {
      release();
      await limited.close();
    }
  });

  test('a wrong path or method says what it expects', async () => {
    assert.equal((await callLocal(server.port, ca, 'POST', '/validate/p', '{}')).status, 404);
    assert.equal((await callLocal(server.port, ca, 'GET', '/validate/p/1')).status, 405);
    assert.equal((await callLocal(server.port, ca, 'GET', '/audit')).status, 405);
    const lost = await callLocal(server.port, ca, 'POST', '/audit/x', '{}');
    assert.deepEqual(
      [lost.status, JSON.parse(lost.body)],
      [404, { error: 'expected POST /validate/<policy>/<generation> or /audit' }],
    );
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

  test('connections handed over are under the same limits: the handshake timeout and the connection cap', async () => {
    const limits = { maxConnections: 1, tlsHandshakeTimeoutMs: 1000 };
    const child = fork(
      join(import.meta.dirname, 'fixtures', 'handover-server.ts'),
      [join(tlsDir, 'tls.crt'), join(tlsDir, 'tls.key'), JSON.stringify(limits)],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
    );
    const socketPath = join(dir, 'handover-limits.sock');
    let handed = 0;
    const parent = createNetServer({ pauseOnConnect: true }, (socket) =>
      child.send(handover.connection, socket, () => handed++),
    );
    try {
      const announced = said(child, handover.ready);
      await said(child, 'certificate set');
      await announced;
      await new Promise<void>((resolve) => parent.listen(socketPath, resolve));
      const start = performance.now();
      const silent = connectNet(socketPath);
      const silentClosed = closed(silent, start);
      await until(() => handed === 1, 'the first connection handed over');
      const second = connectNet(socketPath);
      const secondClosed = closed(second);
      await until(() => handed === 2, 'the second connection handed over');
      assert.ok((await secondClosed) < 500, 'past the cap: closed at once');
      const ms = await silentClosed;
      assert.ok(ms >= 900 && ms < 3000, `no handshake: dropped after ${Math.round(ms)} ms`);
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
