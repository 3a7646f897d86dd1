import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Deployment } from '../../api/kube.ts';
import {
  computePolicyServerStatus,
  desiredDeployment,
  desiredService,
  planPolicyServer,
  type PolicyServerOptions,
} from '../../control-plane/functions/policyserver-core.ts';
import { aDeployment, aPolicyServer, NAMESPACE, NOW } from '../fixtures/builders.ts';

const server = aPolicyServer({
  spec: {
    serviceAccountName: 'policy-server',
    env: [{ name: 'LOG_LEVEL', value: 'debug' }],
    resources: { limits: { cpu: 1, memory: '256Mi' } },
  },
});
const options = { namespace: NAMESPACE };

describe('desiredDeployment', () => {
  const deployment = desiredDeployment(server, options);
  const pod = deployment.spec?.template.spec;
  const container = pod?.containers[0];

  test("is named after the server, in rollcall's namespace, owned by the PolicyServer", () => {
    assert.equal(deployment.metadata?.name, 'policy-server-default');
    assert.equal(deployment.metadata?.namespace, NAMESPACE);
    assert.deepEqual(deployment.metadata?.ownerReferences, [
      {
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'PolicyServer',
        name: 'default',
        uid: 'uid-ps-default',
        controller: true,
      },
    ]);
  });

  test('labels its pods with the server name, which its selector matches', () => {
    assert.deepEqual(deployment.spec?.selector.matchLabels, {
      'rollcall.dev/policy-server': 'default',
    });
    assert.equal(
      deployment.spec?.template.metadata?.labels?.['rollcall.dev/policy-server'],
      'default',
    );
  });

  test('copies replicas, progress deadline, image and service account from the spec', () => {
    assert.equal(deployment.spec?.replicas, 3);
    assert.equal(deployment.spec?.progressDeadlineSeconds, 600);
    assert.equal(container?.image, 'ghcr.io/rollcall/policy-server:v1');
    assert.equal(pod?.serviceAccountName, 'policy-server');
  });

  test("gives each pod POD_NAME, POD_NAMESPACE and POLICY_SERVER after the user's env", () => {
    assert.deepEqual(container?.env, [
      { name: 'LOG_LEVEL', value: 'debug' },
      { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
      { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
      { name: 'POLICY_SERVER', value: 'default' },
    ]);
  });

  test('has an HTTPS readiness probe on the serving port', () => {
    assert.deepEqual(container?.readinessProbe?.httpGet, {
      path: '/readyz',
      port: 'https',
      scheme: 'HTTPS',
    });
    assert.deepEqual(container?.ports, [{ name: 'https', containerPort: 8443, protocol: 'TCP' }]);
  });

  test('runs as non-root, without privilege escalation or capabilities (Pod Security restricted)', () => {
    const pod = desiredDeployment(aPolicyServer(), options).spec?.template.spec;
    assert.deepEqual(pod?.securityContext, {
      runAsNonRoot: true,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    assert.deepEqual(pod?.containers[0]?.securityContext, {
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
    });
  });

  test('gets no environment variables for the namespace’s Services, whatever its image', () => {
    for (const image of ['ghcr.io/rollcall/policy-server:v1', undefined])
      assert.equal(
        desiredDeployment(aPolicyServer({ spec: { image } }), options).spec?.template.spec
          ?.enableServiceLinks,
        false,
      );
  });

  test('writes integer resource quantities as strings', () => {
    assert.deepEqual(container?.resources, { limits: { cpu: '1', memory: '256Mi' } });
  });

  test('leaves out what the spec leaves out', () => {
    const minimal = desiredDeployment(aPolicyServer(), options).spec?.template.spec;
    assert.ok(!('serviceAccountName' in (minimal ?? {})));
    assert.ok(!('resources' in (minimal?.containers[0] ?? {})));
  });
});

describe("desiredDeployment for rollcall's own image (no spec.image)", () => {
  const own = aPolicyServer({ spec: { image: undefined } });
  const container = (s = own, o: PolicyServerOptions = options) =>
    desiredDeployment(s, o).spec?.template.spec?.containers[0];
  const pod = desiredDeployment(own, options).spec?.template.spec;

  test('runs rollcall:0.1.0 as `policy-server` on 8443 with the certificate directory', () => {
    assert.equal(container()?.image, 'rollcall:0.1.0');
    assert.deepEqual(container()?.args, [
      'policy-server',
      '--port=8443',
      '--tls-dir=/var/run/rollcall/tls',
    ]);
  });

  test('passes spec.sources as flags, only those granted (none: HTTPS to public addresses)', () => {
    const args = (sources: { allowInsecureHTTP: boolean; allowPrivateDestinations: boolean }) =>
      container(aPolicyServer({ spec: { image: undefined, sources } }))?.args?.slice(3);
    assert.deepEqual(args({ allowInsecureHTTP: false, allowPrivateDestinations: false }), []);
    assert.deepEqual(args({ allowInsecureHTTP: true, allowPrivateDestinations: false }), [
      '--sources-allow-insecure-http',
    ]);
    assert.deepEqual(args({ allowInsecureHTTP: true, allowPrivateDestinations: true }), [
      '--sources-allow-insecure-http',
      '--sources-allow-private-destinations',
    ]);
  });

  test('runs the image given by --policy-server-image instead, when set', () => {
    assert.equal(
      container(own, { ...options, policyServerImage: 'registry.example/rollcall:1.2' })?.image,
      'registry.example/rollcall:1.2',
    );
  });

  test('mounts the serving certificate Secret read-only, readable by its group only, and /tmp', () => {
    assert.deepEqual(pod?.volumes, [
      { name: 'tls', secret: { secretName: 'policy-server-default-tls', defaultMode: 0o440 } },
      { name: 'tmp', emptyDir: { sizeLimit: '16Mi' } },
    ]);
    assert.deepEqual(container()?.volumeMounts, [
      { name: 'tls', mountPath: '/var/run/rollcall/tls', readOnly: true },
      { name: 'tmp', mountPath: '/tmp' },
    ]);
  });

  test("runs as the image's user on a read-only root, the certificate files in its group", () => {
    assert.deepEqual(pod?.securityContext, {
      runAsNonRoot: true,
      runAsUser: 1000,
      runAsGroup: 1000,
      fsGroup: 1000,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    assert.deepEqual(container()?.securityContext, {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
  });

  test('has default requests and a memory limit, which spec.resources replaces whole', () => {
    assert.deepEqual(container()?.resources, {
      requests: { cpu: '100m', memory: '128Mi' },
      limits: { memory: '2560Mi' },
    });
    const sized = aPolicyServer({
      spec: { image: undefined, resources: { requests: { cpu: 2 } } },
    });
    assert.deepEqual(container(sized)?.resources, { requests: { cpu: '2' } });
  });

  test("mounts the caSecretRef Secret instead when the server names one (someone else's certificate)", () => {
    const pod = desiredDeployment(
      aPolicyServer({ spec: { image: undefined, caSecretRef: { name: 'cm-tls', key: 'ca.crt' } } }),
      options,
    ).spec?.template.spec;
    assert.deepEqual(pod?.volumes?.[0], {
      name: 'tls',
      secret: { secretName: 'cm-tls', defaultMode: 0o440 },
    });
  });

  test('probes /readyz every 2 s and /healthz for liveness, both over HTTPS', () => {
    assert.deepEqual(container()?.readinessProbe, {
      httpGet: { path: '/readyz', port: 'https', scheme: 'HTTPS' },
      periodSeconds: 2,
      failureThreshold: 3,
    });
    assert.deepEqual(container()?.livenessProbe, {
      httpGet: { path: '/healthz', port: 'https', scheme: 'HTTPS' },
      periodSeconds: 10,
      failureThreshold: 3,
    });
  });

  test('keeps the downward-API environment', () => {
    assert.deepEqual(
      container()?.env?.map((e) => e.name),
      ['POD_NAME', 'POD_NAMESPACE', 'POLICY_SERVER'],
    );
  });

  test('a server with its own image gets no arguments, volume or liveness probe from rollcall', () => {
    const theirs = desiredDeployment(server, options).spec?.template.spec;
    assert.ok(!('volumes' in (theirs ?? {})));
    const c = theirs?.containers[0] ?? { name: '' };
    for (const field of ['args', 'volumeMounts', 'livenessProbe'])
      assert.ok(!(field in c), `${field} is not set`);
    // Its user and writable paths are its own (and no default resources: see above).
    assert.ok(!('runAsUser' in (theirs?.securityContext ?? {})));
    assert.ok(!('readOnlyRootFilesystem' in (c.securityContext ?? {})));
    assert.equal(c.readinessProbe?.periodSeconds, 5);
  });

  test('its status compares the Deployment with the image it should run, not an absent spec.image', () => {
    const deployment = {
      ...aDeployment(own),
      spec: {
        replicas: 3,
        template: { spec: { containers: [{ name: 'policy-server', image: 'rollcall:0.1.0' }] } },
      },
    };
    const status = computePolicyServerStatus(own, deployment, NOW, options);
    assert.notEqual(status.conditions?.[0]?.reason, 'DeploymentOutOfDate');
    const other = computePolicyServerStatus(own, deployment, NOW, {
      ...options,
      policyServerImage: 'rollcall:0.2.0',
    });
    assert.equal(other.conditions?.[0]?.reason, 'DeploymentOutOfDate');
  });
});

describe('desiredService', () => {
  const service = desiredService(server, options);
  test("selects the server's pods and maps port 443 to the container's https port", () => {
    assert.equal(service.metadata?.name, 'policy-server-default');
    assert.deepEqual(service.spec?.selector, { 'rollcall.dev/policy-server': 'default' });
    assert.deepEqual(service.spec?.ports, [
      { name: 'https', port: 443, targetPort: 'https', protocol: 'TCP' },
    ]);
    assert.equal(service.metadata?.ownerReferences?.[0]?.uid, 'uid-ps-default');
  });
});

function rolledOut(status: Deployment['status'], extra: Partial<Deployment> = {}): Deployment {
  const base = aDeployment(server);
  return {
    ...base,
    ...extra,
    spec: { ...base.spec, progressDeadlineSeconds: 600 },
    status: { observedGeneration: 1, ...status },
  };
}

describe("computePolicyServerStatus follows the Deployment's kstatus", () => {
  const available = [
    { type: 'Progressing', status: 'True', reason: 'NewReplicaSetAvailable' },
    { type: 'Available', status: 'True' },
  ];
  const rows: {
    name: string;
    deployment: Deployment | undefined;
    conditions: string[];
    ready?: string;
  }[] = [
    {
      name: 'no Deployment yet is Reconciling',
      deployment: undefined,
      conditions: ['Ready=False/DeploymentNotFound', 'Reconciling=True/DeploymentNotFound'],
      ready: '0/3',
    },
    {
      name: 'a fully rolled-out Deployment is Ready',
      deployment: rolledOut({
        replicas: 3,
        updatedReplicas: 3,
        readyReplicas: 3,
        availableReplicas: 3,
        conditions: available,
      }),
      conditions: ['Ready=True/Available'],
      ready: '3/3',
    },
    {
      name: "a Deployment with too few ready replicas is Reconciling with kstatus' reason",
      deployment: rolledOut({
        replicas: 3,
        updatedReplicas: 3,
        readyReplicas: 1,
        availableReplicas: 3,
        conditions: available,
      }),
      conditions: ['Ready=False/LessReady', 'Reconciling=True/LessReady'],
      ready: '1/3',
    },
    {
      name: 'ProgressDeadlineExceeded is Stalled',
      deployment: rolledOut({
        replicas: 3,
        updatedReplicas: 1,
        conditions: [
          {
            type: 'Progressing',
            status: 'False',
            reason: 'ProgressDeadlineExceeded',
            message: 'ReplicaSet "x" has timed out progressing.',
          },
        ],
      }),
      conditions: ['Ready=False/ProgressDeadlineExceeded', 'Stalled=True/ProgressDeadlineExceeded'],
    },
    {
      name: 'a Deployment whose latest generation is not observed is Reconciling',
      deployment: rolledOut({
        observedGeneration: 0,
        replicas: 3,
        updatedReplicas: 3,
        readyReplicas: 3,
        availableReplicas: 3,
        conditions: available,
      }),
      conditions: [
        'Ready=False/LatestGenerationNotObserved',
        'Reconciling=True/LatestGenerationNotObserved',
      ],
    },
    {
      name: 'a Deployment still at the old replica count is Reconciling until it is applied',
      deployment: {
        ...aDeployment(server),
        spec: {
          replicas: 1,
          template: { spec: { containers: [{ name: 'policy-server', image: server.spec.image }] } },
        },
      },
      conditions: ['Ready=False/DeploymentOutOfDate', 'Reconciling=True/DeploymentOutOfDate'],
    },
    {
      name: 'a terminating Deployment is Reconciling',
      deployment: rolledOut(
        {},
        {
          metadata: { ...aDeployment(server).metadata, deletionTimestamp: '2024-05-01T11:00:00Z' },
        },
      ),
      conditions: ['Ready=False/DeploymentTerminating', 'Reconciling=True/DeploymentTerminating'],
    },
    {
      name: 'a Deployment with an unreadable status is Reconciling, not a crash',
      deployment: rolledOut({ conditions: 'broken' as unknown as [] }),
      conditions: [
        'Ready=False/DeploymentStatusUnknown',
        'Reconciling=True/DeploymentStatusUnknown',
      ],
    },
  ];
  for (const row of rows) {
    test(row.name, () => {
      const status = computePolicyServerStatus(server, row.deployment, NOW);
      assert.deepEqual(
        status.conditions?.map((c) => `${c.type}=${c.status}/${c.reason}`),
        row.conditions,
      );
      assert.equal(
        status.summary,
        row.conditions.length === 1 ? 'Ready' : row.conditions[1]?.split('=')[0],
      );
      assert.equal(status.observedGeneration, 1);
      if (row.ready) assert.equal(status.ready, row.ready);
    });
  }

  test("the Stalled message is the Deployment controller's own", () => {
    const status = computePolicyServerStatus(server, rows[3]?.deployment, NOW);
    assert.equal(status.conditions?.[0]?.message, 'ReplicaSet "x" has timed out progressing.');
  });

  test('replica counts are copied from the Deployment', () => {
    const status = computePolicyServerStatus(
      server,
      rolledOut({ replicas: 4, updatedReplicas: 2, readyReplicas: 3, availableReplicas: 1 }),
      NOW,
    );
    assert.deepEqual(
      [status.replicas, status.updatedReplicas, status.readyReplicas, status.availableReplicas],
      [4, 2, 3, 1],
    );
  });

  test('planPolicyServer bundles manifests and status for one reconcile', () => {
    const plan = planPolicyServer(server, undefined, options, NOW);
    assert.equal(plan.deployment.kind, 'Deployment');
    assert.equal(plan.service.kind, 'Service');
    assert.equal(plan.status.summary, 'Reconciling');
  });
});
