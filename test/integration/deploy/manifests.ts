// Helpers for the deploy tests: build deploy/ with the cluster's own kubectl (kustomize is
// built in), and apply or remove parts of it on the test cluster.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { repoRoot } from '../../../cluster/paths.ts';
import { testCluster } from '../../support/kube.ts';

export const deployDir = join(repoRoot, 'deploy');
export const NAMESPACE = 'rollcall-system';

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

export interface KubectlResult {
  status: number;
  stdout: string;
  stderr: string;
}

/** Runs the test cluster's kubectl as admin; never throws (callers assert on the result). */
export function kubectlRun(args: string[], input?: string): KubectlResult {
  const state = testCluster();
  const out = spawnSync(
    state.binaries.kube,
    ['kubectl', `--kubeconfig=${state.kubeconfig}`, ...args],
    { input, encoding: 'utf8' },
  );
  return {
    status: out.status ?? -1,
    stdout: out.stdout ?? '',
    stderr: out.stderr ?? out.error?.message ?? '',
  };
}

export function kubectlOk(args: string[], input?: string): string {
  const out = kubectlRun(args, input);
  if (out.status !== 0)
    throw new Error(`kubectl ${args.join(' ')} failed (${out.status}): ${out.stderr}`);
  return out.stdout;
}

/** `kubectl kustomize DIR`, parsed. */
export function build(dir = deployDir): Manifest[] {
  return parseAllDocuments(kubectlOk(['kustomize', dir]))
    .map((doc) => doc.toJS() as Manifest)
    .filter((m) => m !== null);
}

export const toYaml = (manifests: Manifest[]) =>
  manifests.map((m) => JSON.stringify(m)).join('\n---\n');

/** What the RBAC tests apply for real: the namespace, the CRDs and the accounts with their roles. */
export const RBAC_KINDS = new Set([
  'Namespace',
  'CustomResourceDefinition',
  'ServiceAccount',
  'Role',
  'RoleBinding',
  'ClusterRole',
  'ClusterRoleBinding',
]);

/** True if the namespace exists (and is not being deleted). */
export function namespaceExists(name = NAMESPACE): boolean {
  const out = kubectlRun(['get', 'namespace', name, '-o', 'jsonpath={.status.phase}']);
  return out.status === 0 && out.stdout === 'Active';
}

/** Deletes the namespace and waits until it is gone, so the next test file can create it again. */
export function deleteNamespace(name = NAMESPACE): void {
  kubectlRun(['delete', 'namespace', name, '--ignore-not-found', '--wait=true', '--timeout=60s']);
}

/** Waits for a namespace left terminating by an earlier run, then creates it. */
export function createNamespace(name = NAMESPACE): void {
  kubectlRun(['wait', '--for=delete', `namespace/${name}`, '--timeout=60s']);
  kubectlOk(['create', 'namespace', name]);
}
