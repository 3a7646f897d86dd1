// `rollcall policy-server` as a real process against the real local cluster: it loads the
// Policies of its server, reports them on its pod (uid, generation, state, position of a CEL
// typo), turns Ready, answers AdmissionReviews with the policy's verdict, keeps serving the
// served generation from its PolicyRevision when the current one breaks, loads spec.source
// documents (404, digest mismatch, slow, fixed later), and exits cleanly.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { POLICY_SERVER_LABEL } from '../../../api/constants.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { callLocal } from '../../support/https.ts';
import { policyManifest } from '../../support/manifests.ts';
import { configMapReview, TestPolicyServer } from '../../support/policy-server-process.ts';
import { until as poll } from '../../support/scenario.ts';

const kc = testKubeConfig();
const custom = kc.makeApiClient(CustomObjectsApi);
const namespace = uniqueName('ps-server');
const server = uniqueName('srv');
const podName = 'policy-server-under-test';
const ps = new TestPolicyServer({ namespace, server, podName });
const good = `${server}-names`;
const typo = `${server}-typo`;
const foreign = `${server}-other`;
const group = { group: 'rollcall.dev', version: 'v1alpha1' };

const rules = [
  { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['configmaps'] },
];
const goodSpec = {
  policyServer: server,
  rules,
  settings: { forbidden: 'forbidden' },
  validations: [
    {
      expression: 'object.metadata.name != params.forbidden',
      messageExpression: "'the name ' + object.metadata.name + ' is taken'",
    },
  ],
};

const until = <T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 60_000) =>
  poll(what, check, { timeoutMs, everyMs: 100 });
const report = () => ps.report();
/** A Policy on this file's server, unless `spec` names another. */
const policy = (name: string, spec: Record<string, unknown>) => policyManifest(name, server, spec);

describe('rollcall policy-server on the local cluster', () => {
  let child: ChildProcess;
  let port: number;
  let startedAt: number;
  let listeningAt: number;
  const uids: Record<string, string> = {};
  const cleanup: string[] = [];

  const call = (method: string, path: string, body?: unknown) =>
    callLocal(port, ps.ca, method, path, body === undefined ? undefined : JSON.stringify(body));

  const review = (name: string) => configMapReview(`req-${name}`, namespace, name, { a: '1' });
  const validate = async (policyName: string, generation: number, name: string) => {
    const res = await call('POST', `/validate/${policyName}/${generation}`, review(name));
    assert.equal(res.status, 200, res.body);
    return (
      JSON.parse(res.body) as {
        response: {
          uid: string;
          allowed: boolean;
          status?: { message: string };
          warnings?: string[];
        };
      }
    ).response;
  };

  before(async () => {
    await ps.prepare();
    for (const [name, spec] of [
      [good, goodSpec],
      [
        typo,
        {
          ...goodSpec,
          validations: [{ expression: 'true' }, { expression: "objekt.metadata.name == 'x'" }],
        },
      ],
      [foreign, { ...goodSpec, policyServer: `${server}-elsewhere` }],
    ] as const) {
      const created = (await custom.createClusterCustomObject({
        ...group,
        plural: 'policies',
        body: policy(name, spec),
      })) as {
        metadata: { uid: string };
      };
      uids[name] = created.metadata.uid;
    }

    ({ child, port, startedAt, listeningAt } = await ps.start({
      logName: 'policy-server-it.log',
      // A later flag wins, as the node agent relies on: start() ends with --port=0. The
      // spec.source bundles below are plain HTTP on loopback, which the server must allow.
      args: [
        '--port=8443',
        '--sources-allow-insecure-http',
        '--sources-allow-private-destinations',
      ],
      env: { LOG_LEVEL: 'debug' },
    }));
  });

  after(async () => {
    ps.kill();
    for (const name of [good, typo, foreign, ...cleanup])
      await custom
        .deleteClusterCustomObject({ ...group, plural: 'policies', name })
        .catch(() => {});
    await custom
      .deleteClusterCustomObject({ ...group, plural: 'policyrevisions', name: `${good}-1` })
      .catch(() => {});
    await ps.cleanUp();
  });

  test('reports a good Policy Loaded and a CEL typo Failed with its position, and only its own server’s', async () => {
    const r = await until('both policies reported in a final state', async () => {
      const current = await report();
      return current[good]?.state === 'Loaded' && current[typo]?.state === 'Failed'
        ? current
        : undefined;
    });
    assert.deepEqual(r[good], { uid: uids[good], generation: 1, state: 'Loaded' });
    assert.equal(r[typo]!.uid, uids[typo]);
    assert.equal(r[typo]!.generation, 1);
    assert.match(r[typo]!.message!, /^spec\.validations\[1\]\.expression: .*objekt.* at 1:1/);
    assert.equal(
      r[foreign],
      undefined,
      'a Policy of another server is not this replica’s business',
    );
  });

  test('turns Ready once every needed generation is Loaded or Failed', async () => {
    const res = await until('/readyz 200', async () => {
      const r = await call('GET', '/readyz');
      return r.status === 200 ? r : undefined;
    });
    console.log(
      `# process start → listening: ${listeningAt - startedAt} ms; → /readyz 200: ${Date.now() - startedAt} ms`,
    );
    assert.match(res.body, /^ok: 2 policies: 1 generations loaded, 1 failed/);
    assert.equal((await call('GET', '/healthz')).status, 200);
  });

  test('denies a violating request with the policy’s message and allows a conforming one', async () => {
    const denied = await validate(good, 1, 'forbidden');
    assert.equal(denied.uid, 'req-forbidden');
    assert.equal(denied.allowed, false);
    assert.equal(denied.status?.message, 'the name forbidden is taken');
    const t = performance.now();
    const allowed = await validate(good, 1, 'fine');
    console.log(
      `# one admission request over HTTPS (new connection): ${(performance.now() - t).toFixed(1)} ms`,
    );
    assert.equal(allowed.allowed, true);
  });

  test('gives CEL the request’s Namespace as namespaceObject', async () => {
    const name = `${server}-ns`;
    cleanup.push(name);
    await custom.createClusterCustomObject({
      ...group,
      plural: 'policies',
      body: policy(name, {
        policyServer: server,
        rules,
        validations: [
          {
            expression:
              'namespaceObject != null && namespaceObject.metadata.name == request.namespace',
            message: 'no such namespace',
          },
        ],
      }),
    });
    await until('the namespace policy Loaded', async () =>
      (await report())[name]?.state === 'Loaded' ? true : undefined,
    );
    assert.equal((await validate(name, 1, 'fine')).allowed, true);
    const elsewhere = review('fine');
    elsewhere.request.namespace = 'no-such-namespace';
    const res = await call('POST', `/validate/${name}/1`, elsewhere);
    assert.match(res.body, /"allowed":false.*no such namespace/);
  });

  test('answers a generation it has not loaded by the failurePolicy, saying so', async () => {
    const response = await validate(good, 9, 'fine');
    assert.equal(response.allowed, false);
    assert.match(response.status!.message, /this replica has not loaded generation 9/);
    const failed = await validate(typo, 1, 'fine');
    assert.match(
      failed.status!.message,
      /has not loaded generation 1 \(it failed: spec\.validations\[1\]/,
    );
  });

  test('keeps serving the served generation from its PolicyRevision when the current one breaks', async () => {
    await custom.createClusterCustomObject({
      ...group,
      plural: 'policyrevisions',
      body: {
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'PolicyRevision',
        metadata: {
          name: `${good}-1`,
          labels: { [POLICY_SERVER_LABEL]: server, 'rollcall.dev/policy': good },
        },
        spec: { policy: good, policyUID: uids[good], generation: 1, policySpec: goodSpec },
      },
    });
    await custom.patchClusterCustomObjectStatus(
      { ...group, plural: 'policies', name: good, body: { status: { servedGeneration: 1 } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    await custom.patchClusterCustomObject(
      {
        ...group,
        plural: 'policies',
        name: good,
        body: { spec: { validations: [{ expression: "objekt.metadata.name != 'forbidden'" }] } },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    const entry = await until('generation 2 Failed while serving 1', async () => {
      const e = (await report())[good];
      return e?.generation === 2 && e.state === 'Failed' ? e : undefined;
    });
    assert.equal(entry.serving, 1);
    assert.match(entry.message!, /^spec\.validations\[0\]\.expression: .*objekt/);
    const denied = await validate(good, 1, 'forbidden');
    assert.equal(denied.allowed, false);
    assert.equal(denied.status?.message, 'the name forbidden is taken');
    assert.equal(
      (await call('GET', '/readyz')).status,
      200,
      'a failed generation never makes it unready',
    );
  });

  test('loads code from spec.source: 404 and digest mismatch Failed, slow Loading then Loaded, a 404 fixed later Loaded', async () => {
    const doc =
      'validations:\n  - expression: "object.metadata.name != \'forbidden\'"\n    message: from the source\n';
    const digest = createHash('sha256').update(doc).digest('hex');
    let published = false;
    const files = createServer((req, res) => {
      if (req.url === '/slow.yaml') return void setTimeout(() => res.end(doc), 2000);
      if (req.url === '/later.yaml' && published) return void res.end(doc);
      if (req.url === '/ok.yaml') return void res.end(doc);
      res.writeHead(404, 'Not Found').end();
    });
    await new Promise<void>((r) => files.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
    try {
      const sourced = (name: string, path: string, sha256 = digest) =>
        custom.createClusterCustomObject({
          ...group,
          plural: 'policies',
          body: policy(name, {
            policyServer: server,
            rules,
            source: { url: `${base}${path}`, sha256 },
          }),
        });
      const wrong = 'b'.repeat(64);
      const names = {
        missing: `${server}-src404`,
        mismatch: `${server}-srcsha`,
        slow: `${server}-srcslow`,
        later: `${server}-srclater`,
      };
      cleanup.push(...Object.values(names));
      await sourced(names.missing, '/nothing.yaml');
      await sourced(names.mismatch, '/ok.yaml', wrong);
      await sourced(names.slow, '/slow.yaml');
      await sourced(names.later, '/later.yaml');

      const loading = await until('the slow source reported Loading', async () => {
        const e = (await report())[names.slow];
        return e?.state === 'Loading' ? e : undefined;
      });
      assert.equal(loading.generation, 1);
      const r = await until('every source in a final state', async () => {
        const current = await report();
        const done = Object.values(names).every((n) =>
          ['Loaded', 'Failed'].includes(current[n]?.state ?? ''),
        );
        return done ? current : undefined;
      });
      assert.equal(r[names.missing]!.state, 'Failed');
      assert.equal(
        r[names.missing]!.message,
        `spec.source: GET ${base}/nothing.yaml answered HTTP 404 Not Found`,
      );
      assert.equal(r[names.mismatch]!.state, 'Failed');
      assert.equal(
        r[names.mismatch]!.message,
        `spec.source: ${base}/ok.yaml does not match spec.source.sha256 ${wrong}`,
      );
      assert.equal(r[names.slow]!.state, 'Loaded');
      assert.equal(r[names.later]!.state, 'Failed');
      const denied = await validate(names.slow, 1, 'forbidden');
      assert.equal(denied.status?.message, 'from the source');

      // The file appears: the failed download is retried in the background (10 s backoff) and loads.
      published = true;
      const fixed = await until(
        'the fixed source Loaded',
        async () => ((await report())[names.later]?.state === 'Loaded' ? true : undefined),
        30_000,
      );
      assert.equal(fixed, true);
    } finally {
      files.closeAllConnections();
      files.close();
    }
  });

  test('exports admission and load metrics', async () => {
    const text = (await call('GET', '/metrics')).body;
    assert.match(
      text,
      new RegExp(
        `rollcall_admission_requests_total\\{policy="${good}",generation="1",verdict="denied"\\} [1-9]`,
      ),
    );
    assert.match(text, new RegExp(`rollcall_policy_load_failures_total\\{policy="${typo}"\\} 1`));
    assert.match(
      text,
      /rollcall_policy_load_duration_seconds_count\{source="inline",state="Loaded"\} [1-9]/,
    );
    assert.match(text, /rollcall_evaluation_threads\{state="idle"\} [1-9]/);
  });

  test('stops cleanly on SIGTERM', async () => {
    const exited = new Promise<number | null>((resolve) =>
      child.once('exit', (code) => resolve(code)),
    );
    const t = Date.now();
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
    assert.ok(Date.now() - t < 5000, `took ${Date.now() - t} ms to stop`);
  });
});
