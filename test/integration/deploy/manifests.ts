// Helpers for the deploy tests: build deploy/ with the cluster's own kubectl (kustomize is
// built in), render charts/rollcall with helm (built from its module, cached), and apply or
// remove parts of them on the test cluster.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { ensureHelm } from '../../../tooling/cluster/build.ts';
import { repoRoot } from '../../../tooling/cluster/paths.ts';
import { testCluster } from '../../support/kube.ts';

export const deployDir = join(repoRoot, 'deploy');
export const chartDir = join(repoRoot, 'charts', 'rollcall');
export const NAMESPACE = 'rollcall-system';

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

export interface CommandResult {
  status: number;
  stdout: string;
  stderr: string;
}

/** Runs the test cluster's kubectl as admin; never throws (callers assert on the result). */
export function kubectlRun(args: string[], input?: string): CommandResult {
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

const parseManifests = (text: string) =>
  parseAllDocuments(text)
    .map((doc) => doc.toJS() as Manifest)
    .filter((m) => m !== null);

/** `kubectl kustomize DIR`, parsed. */
export function build(dir = deployDir): Manifest[] {
  return parseManifests(kubectlOk(['kustomize', dir]));
}

let helm: Promise<string> | undefined;

/** Runs helm (built on first use); never throws (callers assert on the result). */
export async function helmRun(args: string[]): Promise<CommandResult> {
  helm ??= ensureHelm((line) => console.log(`# ${line}`));
  const out = spawnSync(await helm, args, { encoding: 'utf8' });
  return { status: out.status ?? -1, stdout: out.stdout ?? '', stderr: out.stderr ?? '' };
}

/**
 * `helm template rollcall charts/rollcall --namespace rollcall-system --include-crds <args>`,
 * parsed: what `helm install rollcall charts/rollcall -n rollcall-system` would create.
 */
export async function renderChart(args: string[] = []): Promise<Manifest[]> {
  const out = await helmRun([
    'template',
    'rollcall',
    chartDir,
    '--namespace',
    NAMESPACE,
    '--include-crds',
    ...args,
  ]);
  if (out.status !== 0) throw new Error(`helm template failed (${out.status}): ${out.stderr}`);
  return parseManifests(out.stdout);
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

/**
 * For the surrounding suite: rollcall's namespace, created before it when absent and deleted
 * after it only then. A server-side dry run of a Namespace does not create it, so the
 * namespaced objects after it would fail with NotFound: the namespace must exist for real (as
 * it does after the first real install).
 */
export function withNamespaceForDryRuns(): void {
  let created = false;
  before(() => {
    if (!namespaceExists()) {
      createNamespace();
      created = true;
    }
  });
  after(() => {
    if (created) deleteNamespace();
  });
}
