// Manifests tests and benchmarks apply, built in one place.
import { API_VERSION } from '../../api/constants.ts';

/** The simulated data plane's image: a PolicyServer of it gets `rollcall sim` replicas. */
export const SIM_IMAGE = 'sim://policy-server';

/** An admission rule matching CREATE of core-group `resources`. */
export const createRule = (...resources: string[]) => ({
  operations: ['CREATE'],
  apiGroups: [''],
  apiVersions: ['v1'],
  resources,
});

/** A selector of the one namespace named `namespace`. */
export const namespaceNamed = (namespace: string) => ({
  matchLabels: { 'kubernetes.io/metadata.name': namespace },
});

/**
 * A Policy on `server`. `spec` brings its code (`module`, `validations` or `source`) and
 * whatever else the test needs; its rules default to CREATE of pods.
 */
export function policyManifest(name: string, server: string, spec: Record<string, unknown>) {
  return {
    apiVersion: API_VERSION,
    kind: 'Policy',
    metadata: { name },
    spec: { policyServer: server, rules: [createRule('pods')], ...spec },
  };
}

/** A PolicyServer; without `spec.image` it runs rollcall's own image. */
export function policyServerManifest(name: string, spec: Record<string, unknown>) {
  return { apiVersion: API_VERSION, kind: 'PolicyServer', metadata: { name }, spec };
}

/** The label that picks, among a test's Policies, the one that judges an object. */
export const CASE_LABEL = 'e2e.rollcall.dev/case';

/**
 * A Policy on `server` that judges CREATE of the ConfigMaps in `namespace` labelled
 * `CASE_LABEL=<name>` (one test case each); `spec` brings its code.
 */
export function casePolicy(
  name: string,
  server: string,
  namespace: string,
  spec: Record<string, unknown>,
) {
  return policyManifest(name, server, {
    rules: [createRule('configmaps')],
    namespaceSelector: namespaceNamed(namespace),
    objectSelector: { matchLabels: { [CASE_LABEL]: name } },
    ...spec,
  });
}

/** A ConfigMap, uniquely named, that the case Policy `caseName` judges. */
export function caseConfigMap(
  caseName: string,
  {
    labels = {},
    data = {},
  }: { labels?: Record<string, string>; data?: Record<string, string> } = {},
) {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: `${caseName}-${Math.random().toString(36).slice(2, 7)}`,
      labels: { [CASE_LABEL]: caseName, ...labels },
    },
    data,
  };
}

/**
 * A Policy on `server` that judges CREATE of ConfigMaps in `namespace` only and denies those
 * whose name starts with `refused`, saying "refused by rollcall".
 */
export function refusingPolicy(
  name: string,
  server: string,
  namespace: string,
  spec: Record<string, unknown> = {},
) {
  return policyManifest(name, server, {
    namespaceSelector: namespaceNamed(namespace),
    validations: [
      { expression: "!object.metadata.name.startsWith('refused')", message: 'refused by rollcall' },
    ],
    rules: [createRule('configmaps')],
    ...spec,
  });
}
