// The admission benchmark's policies, each written once and applied twice, as rollcall Policies
// and as native ValidatingAdmissionPolicies, so both subjects evaluate exactly the same CEL on
// exactly the same Pod: one policy of six expressions, and the library's Pod Security
// restricted set (converted as `rollcall convert --to vap` converts it).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { policyToVap } from '../cli/authoring/convert-to-vap.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { policyManifest } from '../test/support/manifests.ts';

/** The six checks; the bench Pod passes all of them, so every request is allowed. */
export const validations = [
  {
    expression: "has(object.metadata.labels) && 'app' in object.metadata.labels",
    message: 'pods need an app label',
  },
  {
    expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
    message: 'images must not use the :latest tag',
  },
  {
    expression:
      "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits) && 'cpu' in c.resources.limits && 'memory' in c.resources.limits)",
    message: 'every container needs cpu and memory limits',
  },
  {
    expression:
      'has(object.spec.securityContext) && has(object.spec.securityContext.runAsNonRoot) && object.spec.securityContext.runAsNonRoot == true',
    message: 'pods must run as non-root',
  },
  {
    expression: "object.metadata.name.matches('^[a-z][a-z0-9-]{0,62}$')",
    message: 'pod names must be lowercase DNS labels',
  },
  {
    expression: 'size(object.spec.containers) <= 4',
    message: 'at most 4 containers',
  },
] as const;

const podRule = {
  operations: ['CREATE'],
  apiGroups: [''],
  apiVersions: ['v1'],
  resources: ['pods'],
};

const inNamespace = (namespace: string) => ({
  matchLabels: { 'kubernetes.io/metadata.name': namespace },
});

/**
 * A Pod every check allows, of the six and of the restricted set; `violating` breaks the
 * :latest rule and the privilege escalation control (to probe that a policy is live).
 */
export function benchPod(name: string, violating = false) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { app: 'bench' } },
    spec: {
      securityContext: {
        runAsNonRoot: true,
        runAsUser: 1000,
        seccompProfile: { type: 'RuntimeDefault' },
      },
      containers: [
        {
          name: 'app',
          image: violating ? 'registry.example/app:latest' : 'registry.example/app:1.0',
          resources: { limits: { cpu: '100m', memory: '64Mi' } },
          securityContext: {
            allowPrivilegeEscalation: violating,
            capabilities: { drop: ['ALL'] },
          },
        },
      ],
    },
  };
}

/** What the denial of the violating Pod by each set says early in its answer (openLoop keeps 300 characters). */
export const denialOf = {
  six: ':latest tag',
  restricted: 'pss-restricted-privilege-escalation',
} as const;
export type PolicySet = keyof typeof denialOf;
export const policySets = Object.keys(denialOf) as PolicySet[];

/**
 * The policy library's Pod Security restricted set (its Baseline and Restricted files: one
 * Policy per control), on `server`, each matching pods of `namespace` only.
 */
export function restrictedPolicies(server: string, namespace: string) {
  return ['pod-security-baseline.yaml', 'pod-security-restricted.yaml'].flatMap((file) =>
    parseAllDocuments(readFileSync(join(repoRoot, 'policies', file), 'utf8'))
      .map(
        (doc) => doc.toJS() as { metadata: { name: string }; spec: Record<string, unknown> } | null,
      )
      .filter((policy) => policy !== null)
      .map((policy) => ({
        ...policy,
        spec: { ...policy.spec, policyServer: server, namespaceSelector: inNamespace(namespace) },
      })),
  );
}

/** The same set as ValidatingAdmissionPolicies and Bindings, as `rollcall convert --to vap` gives them. */
export function restrictedNative(namespace: string) {
  return restrictedPolicies('none', namespace).flatMap((policy) => {
    const conversion = policyToVap(policy);
    if (!conversion.ok) throw new Error(conversion.errors.join('; '));
    return conversion.objects;
  });
}

/** rollcall's side: one Policy on `server` that matches pods of `namespace` only. */
export function rollcallPolicy(name: string, server: string, namespace: string) {
  return policyManifest(name, server, {
    validations: validations.map((v) => ({ ...v })),
    rules: [podRule],
    namespaceSelector: inNamespace(namespace),
    failurePolicy: 'Fail',
    timeoutSeconds: 10,
  });
}

/** The native side: the same checks as a ValidatingAdmissionPolicy and its Binding (Deny). */
export function nativePolicy(name: string, namespace: string) {
  return {
    policy: {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicy',
      metadata: { name },
      spec: {
        failurePolicy: 'Fail',
        matchConstraints: { resourceRules: [podRule] },
        validations: validations.map((v) => ({ ...v })),
      },
    },
    binding: {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata: { name },
      spec: {
        policyName: name,
        validationActions: ['Deny'],
        matchResources: { namespaceSelector: inNamespace(namespace) },
      },
    },
  };
}

/** The AdmissionReview the apiserver would send a webhook for a dry-run create of `pod`. */
export function admissionReview(uid: string, namespace: string, pod: ReturnType<typeof benchPod>) {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid,
      kind: { group: '', version: 'v1', kind: 'Pod' },
      resource: { group: '', version: 'v1', resource: 'pods' },
      requestKind: { group: '', version: 'v1', kind: 'Pod' },
      requestResource: { group: '', version: 'v1', resource: 'pods' },
      name: pod.metadata.name,
      namespace,
      operation: 'CREATE',
      userInfo: { username: 'admin', groups: ['system:masters', 'system:authenticated'] },
      object: { ...pod, metadata: { ...pod.metadata, namespace } },
      options: { apiVersion: 'meta.k8s.io/v1', kind: 'CreateOptions', dryRun: ['All'] },
      dryRun: true,
    },
  };
}
