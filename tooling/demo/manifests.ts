// The demo's objects: a namespace to try policies in, a PolicyServer running rollcall's own
// image with 3 replicas, one CEL policy that loads and three that really fail (a source URL
// that answers 404, a CEL typo, a source whose digest does not match). Plus the small HTTP
// server the two `source` policies download from.
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { stringify } from 'yaml';
import { DEMO_NAMESPACE, GOOD, SERVER } from './context.ts';
import { POLICY_SERVER_ACCOUNT } from './identities.ts';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** What /bundles/require-probes.yaml serves today. */
const PROBES_BUNDLE = stringify({
  validations: [
    {
      expression: 'object.spec.template.spec.containers.all(c, has(c.readinessProbe))',
      message: 'every container needs a readiness probe',
    },
  ],
});
/** The digest the policy pinned: of the bundle as it was before someone re-published it. */
const PROBES_PINNED = sha256(PROBES_BUNDLE.replace('every container', 'each container'));

const deployments = [
  {
    operations: ['CREATE', 'UPDATE'],
    apiGroups: ['apps'],
    apiVersions: ['v1'],
    resources: ['deployments'],
  },
];

export function demoManifests(bundles: string): Record<string, unknown>[] {
  const policy = (name: string, spec: Record<string, unknown>) => ({
    apiVersion: 'rollcall.dev/v1alpha1',
    kind: 'Policy',
    metadata: { name },
    spec: { policyServer: SERVER, ...spec },
  });
  return [
    {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: DEMO_NAMESPACE, labels: { 'rollcall.dev/demo': 'true' } },
    },
    {
      // No image: rollcall's own, running `rollcall policy-server` in each pod.
      apiVersion: 'rollcall.dev/v1alpha1',
      kind: 'PolicyServer',
      metadata: { name: SERVER },
      spec: {
        replicas: 3,
        progressDeadlineSeconds: 60,
        // Its pods act as this account (deploy/rbac.yaml): read policies, write their own report.
        serviceAccountName: POLICY_SERVER_ACCOUNT,
        // The bundle server below is plain HTTP on loopback, which a PolicyServer refuses
        // unless it says so: a real one would serve HTTPS from a public address.
        sources: { allowInsecureHTTP: true, allowPrivateDestinations: true },
      },
    },
    policy(GOOD, {
      validationActions: ['Deny'],
      failurePolicy: 'Fail',
      rules: [
        { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
      ],
      namespaceSelector: { matchLabels: { 'rollcall.dev/demo': 'true' } },
      validations: [
        {
          expression: "has(object.metadata.labels) && 'owner' in object.metadata.labels",
          message: 'pods in the demo namespace need an owner label',
          reason: 'Forbidden',
        },
      ],
    }),
    policy('deny-latest-tag', {
      rules: deployments,
      // Nobody published this bundle: the download answers 404.
      source: { url: `${bundles}/bundles/deny-latest-tag.yaml`, sha256: sha256('never served') },
    }),
    policy('limit-replicas', {
      rules: deployments,
      settings: { maxReplicas: 5 },
      validations: [
        {
          // The typo: `param` for `params`. The type checker refuses it with its position.
          expression: 'object.spec.replicas <= param.maxReplicas',
          messageExpression: "'at most ' + string(params.maxReplicas) + ' replicas'",
        },
      ],
    }),
    policy('require-probes', {
      rules: deployments,
      source: { url: `${bundles}/bundles/require-probes.yaml`, sha256: PROBES_PINNED },
    }),
  ];
}

/** Serves /bundles/require-probes.yaml on loopback (the policy servers run on this machine). */
export async function startBundleServer(): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    if (req.url === '/bundles/require-probes.yaml')
      res.writeHead(200, { 'content-type': 'application/yaml' }).end(PROBES_BUNDLE);
    else res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The manifests as one YAML stream, for `kubectl apply -f`. */
export const manifestsYaml = (objects: Record<string, unknown>[]) =>
  objects.map((o) => stringify(o)).join('---\n');

// ---------------------------------------------------------------- the audit part

/** The policy the demo adopts in three steps: Audit, then Warn, then Deny. */
export const AUDIT_POLICY = 'no-passwords-in-configmaps';
export const AUDIT_MESSAGE = 'ConfigMaps must not hold passwords: use a Secret';

/** ConfigMaps that exist before the policy: name → data (two hold a password). */
export const EXISTING_CONFIGMAPS: Record<string, Record<string, string>> = {
  'app-settings': { 'log-level': 'info' },
  'db-config': { host: 'db.internal', 'db-password': 'hunter2' },
  'feature-flags': { checkout: 'enabled' },
  'smtp-config': { server: 'mail.internal', 'smtp-password': 'letmein' },
};

export function configMapManifests(): Record<string, unknown>[] {
  return Object.entries(EXISTING_CONFIGMAPS).map(([name, data]) => ({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name, namespace: DEMO_NAMESPACE },
    data,
  }));
}

/** The policy with `actions` as its validationActions (Audit, Warn or Deny). */
export function auditPolicyManifest(actions: string[]): Record<string, unknown> {
  return {
    apiVersion: 'rollcall.dev/v1alpha1',
    kind: 'Policy',
    metadata: { name: AUDIT_POLICY },
    spec: {
      policyServer: SERVER,
      validationActions: actions,
      failurePolicy: 'Fail',
      rules: [
        {
          operations: ['CREATE', 'UPDATE'],
          apiGroups: [''],
          apiVersions: ['v1'],
          resources: ['configmaps'],
        },
      ],
      namespaceSelector: { matchLabels: { 'rollcall.dev/demo': 'true' } },
      validations: [
        {
          expression: "!has(object.data) || object.data.all(k, !k.contains('password'))",
          message: AUDIT_MESSAGE,
        },
      ],
    },
  };
}
