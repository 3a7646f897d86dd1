import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  agentContainer,
  crashBackoffUntil,
  crashGroup,
  recordCrash,
  agentPodSchema,
  podUsesImage,
  expandVars,
  processSpec,
  readinessProbe,
  rewriteMountPaths,
  secretVolumeFiles,
  terminationGraceMs,
  type AgentPod,
  type ProcessSpecInput,
} from '../../../tooling/cluster/node-agent/pod.ts';

const IMAGE = 'rollcall:0.1.0';

/** A policy-server pod as control-plane/functions/policyserver-core.ts writes it for the default image. */
function pod(
  overrides: {
    container?: Record<string, unknown>;
    spec?: Record<string, unknown>;
    metadata?: Record<string, unknown>;
  } = {},
): AgentPod {
  return agentPodSchema.parse({
    metadata: {
      name: 'policy-server-default-abc12',
      namespace: 'rollcall-system',
      uid: 'u-1',
      ...overrides.metadata,
    },
    spec: {
      nodeName: 'kwok-node-0',
      containers: [
        {
          name: 'policy-server',
          image: IMAGE,
          args: ['policy-server', '--port=8443', '--tls-dir=/var/run/rollcall/tls'],
          env: [
            { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
            { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
            { name: 'POLICY_SERVER', value: 'default' },
          ],
          volumeMounts: [{ name: 'tls', mountPath: '/var/run/rollcall/tls', readOnly: true }],
          ...overrides.container,
        },
      ],
      volumes: [{ name: 'tls', secret: { secretName: 'policy-server-default-tls' } }],
      ...overrides.spec,
    },
  });
}

function input(p: AgentPod, more: Partial<ProcessSpecInput> = {}): ProcessSpecInput {
  return {
    pod: p,
    container: agentContainer(p, IMAGE)!,
    execPath: '/usr/bin/node',
    entry: '/repo/cli/rollcall.ts',
    port: 40123,
    podIP: '10.244.0.7',
    mounts: [{ mountPath: '/var/run/rollcall/tls', dir: '/state/pods/p/volumes/tls' }],
    kubeconfig: '/state/kubeconfig',
    ...more,
  };
}

describe('processSpec', () => {
  test('runs rollcall with the container args, the mount rewritten, and loopback address and port last', () => {
    const spec = processSpec(input(pod()));
    assert.ok(!('error' in spec));
    assert.equal(spec.command, '/usr/bin/node');
    assert.deepEqual(spec.args, [
      '/repo/cli/rollcall.ts',
      'policy-server',
      '--port=8443',
      '--tls-dir=/state/pods/p/volumes/tls',
      '--address=127.0.0.1',
      '--port=40123',
    ]);
  });

  test('gives the process the container env, downward API fields and the admin kubeconfig', () => {
    const spec = processSpec(input(pod(), { path: '/usr/bin:/bin' }));
    assert.ok(!('error' in spec));
    assert.deepEqual(spec.env, {
      HOSTNAME: 'policy-server-default-abc12',
      PATH: '/usr/bin:/bin',
      POD_NAME: 'policy-server-default-abc12',
      POD_NAMESPACE: 'rollcall-system',
      POLICY_SERVER: 'default',
      KUBECONFIG: '/state/kubeconfig',
    });
  });

  test('resolves status.podIP and spec.nodeName from the agent', () => {
    const p = pod({
      container: {
        env: [
          { name: 'IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
          { name: 'NODE', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
        ],
      },
    });
    const spec = processSpec(input(p));
    assert.ok(!('error' in spec));
    assert.equal(spec.env.IP, '10.244.0.7');
    assert.equal(spec.env.NODE, 'kwok-node-0');
  });

  test('refuses an env source it cannot resolve, naming the variable', () => {
    const p = pod({
      container: { env: [{ name: 'TOKEN', valueFrom: { secretKeyRef: { name: 's', key: 'k' } } }] },
    });
    const spec = processSpec(input(p));
    assert.ok('error' in spec);
    assert.match(spec.error, /env TOKEN/);
  });

  test("accepts a command that repeats rollcall's entrypoint and refuses any other", () => {
    const repeated = processSpec(
      input(pod({ container: { command: ['node', 'cli/rollcall.ts'], args: ['policy-server'] } })),
    );
    assert.ok(!('error' in repeated));
    assert.deepEqual(repeated.args.slice(0, 2), ['/repo/cli/rollcall.ts', 'policy-server']);
    const other = processSpec(input(pod({ container: { command: ['/bin/sh', '-c', 'sleep 1'] } })));
    assert.ok('error' in other);
    assert.match(other.error, /entrypoint/);
  });

  test('expands $(VAR) references in args from the env', () => {
    const p = pod({ container: { args: ['policy-server', '--server=$(POLICY_SERVER)'] } });
    const spec = processSpec(input(p));
    assert.ok(!('error' in spec));
    assert.equal(spec.args[2], '--server=default');
  });
});

describe('expandVars', () => {
  test('leaves unknown references and turns $$ into a literal $', () => {
    assert.equal(expandVars('$(A)-$(B)-$$(A)', { A: 'a' }), 'a-$(B)-$(A)');
  });
});

describe('rewriteMountPaths', () => {
  const mounts = [
    { mountPath: '/etc/conf', dir: '/local/conf' },
    { mountPath: '/etc/conf/extra/', dir: '/local/extra' },
  ];

  test('rewrites a whole mount path and anything below it', () => {
    assert.equal(rewriteMountPaths('--dir=/etc/conf', mounts), '--dir=/local/conf');
    assert.equal(rewriteMountPaths('/etc/conf/a.yaml', mounts), '/local/conf/a.yaml');
  });

  test('prefers the longest mount path', () => {
    assert.equal(rewriteMountPaths('/etc/conf/extra/x', mounts), '/local/extra/x');
  });

  test('leaves paths that only share a prefix', () => {
    assert.equal(rewriteMountPaths('/etc/config', mounts), '/etc/config');
    assert.equal(rewriteMountPaths('/x/etc/conf', mounts), '/x/etc/conf');
  });

  test('rewrites every occurrence in one argument', () => {
    assert.equal(rewriteMountPaths('/etc/conf:/etc/conf/b', mounts), '/local/conf:/local/conf/b');
  });
});

describe('secretVolumeFiles', () => {
  const data = {
    'tls.crt': Buffer.from('CERT').toString('base64'),
    'tls.key': Buffer.from('KEY').toString('base64'),
  };

  test('writes every key of the Secret, decoded', () => {
    const files = secretVolumeFiles({ name: 'tls', secret: { secretName: 's' } }, data);
    assert.ok(Array.isArray(files));
    assert.deepEqual(
      files.map((f) => [f.path, f.content.toString()]),
      [
        ['tls.crt', 'CERT'],
        ['tls.key', 'KEY'],
      ],
    );
  });

  test('writes only the listed items, at their paths', () => {
    const files = secretVolumeFiles(
      {
        name: 'tls',
        secret: { secretName: 's', items: [{ key: 'tls.crt', path: 'certs/server.crt' }] },
      },
      data,
    );
    assert.ok(Array.isArray(files));
    assert.deepEqual(
      files.map((f) => f.path),
      ['certs/server.crt'],
    );
  });

  test('refuses a missing key and a path that leaves the volume', () => {
    const missing = secretVolumeFiles(
      { name: 'v', secret: { secretName: 's', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
      data,
    );
    assert.deepEqual(missing, { error: 'secret "s" has no key "ca.crt"' });
    const escape = secretVolumeFiles(
      { name: 'v', secret: { secretName: 's', items: [{ key: 'tls.crt', path: '../x' }] } },
      data,
    );
    assert.ok('error' in escape);
  });
});

describe('terminationGraceMs', () => {
  test("uses the deletion's grace period, capped at 10 s", () => {
    assert.equal(terminationGraceMs(pod()), 10_000);
    assert.equal(terminationGraceMs(pod({ metadata: { deletionGracePeriodSeconds: 2 } })), 2_000);
    assert.equal(terminationGraceMs(pod({ spec: { terminationGracePeriodSeconds: 0 } })), 0);
  });
});

describe('readinessProbe', () => {
  test('defaults to HTTPS /readyz with one success and three failures', () => {
    assert.deepEqual(readinessProbe(agentContainer(pod(), IMAGE)!), {
      path: '/readyz',
      https: true,
      successThreshold: 1,
      failureThreshold: 3,
    });
  });

  test("follows the container's httpGet probe", () => {
    const p = pod({
      container: {
        readinessProbe: {
          httpGet: { path: '/ready', scheme: 'HTTP', port: 80 },
          failureThreshold: 1,
        },
      },
    });
    const probe = readinessProbe(agentContainer(p, IMAGE)!);
    assert.equal(probe.path, '/ready');
    assert.equal(probe.https, false);
    assert.equal(probe.failureThreshold, 1);
  });
});

describe('agentContainer', () => {
  test('finds the container of the image and ignores pods of other images', () => {
    assert.equal(agentContainer(pod(), IMAGE)?.name, 'policy-server');
    assert.equal(
      agentContainer(pod({ container: { image: 'example/other:1' } }), IMAGE),
      undefined,
    );
  });
});

describe('crash back-off', () => {
  test('lets the first replacement start at once, then waits 10 s doubling to 5 minutes', () => {
    let record = recordCrash(undefined, 0);
    assert.equal(crashBackoffUntil(record), 0);
    const waits: number[] = [];
    for (let i = 1; i <= 7; i++) {
      record = recordCrash(record, i * 1_000);
      waits.push(crashBackoffUntil(record) - record.lastAt);
    }
    assert.deepEqual(waits, [10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000]);
  });

  test('forgets crashes more than ten minutes apart', () => {
    const record = recordCrash(recordCrash(recordCrash(undefined, 0), 1_000), 1_000 + 11 * 60_000);
    assert.equal(record.count, 1);
    assert.equal(crashBackoffUntil(record), 0);
  });

  test("counts a ReplicaSet's pods together and a bare pod alone", () => {
    const owned = pod({
      metadata: {
        ownerReferences: [
          { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: 'rs-1', controller: true },
        ],
      },
    });
    assert.equal(crashGroup(owned), 'owner/rs-1');
    assert.equal(crashGroup(pod()), 'pod/u-1');
  });
});

describe('podUsesImage', () => {
  test('tells the pods of the image from any other object without parsing it', () => {
    assert.equal(
      podUsesImage({ spec: { containers: [{ image: 'x' }, { image: IMAGE }] } }, IMAGE),
      true,
    );
    assert.equal(podUsesImage({ spec: { containers: [{ image: 'fake-image' }] } }, IMAGE), false);
    for (const odd of [
      undefined,
      null,
      {},
      { spec: { containers: 'no' } },
      { spec: { containers: [null] } },
    ])
      assert.equal(podUsesImage(odd, IMAGE), false);
  });
});
