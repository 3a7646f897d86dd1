// rollcall under its real identities in a test namespace: the ServiceAccounts, RBAC and guards
// of deploy/ (rbac.yaml and the ValidatingAdmissionPolicies of guard-*.yaml), rendered for the
// namespace, and kubeconfigs of the watcher's and the worker's tokens, so that a test runs the
// watcher and the worker as a cluster would, not as the admin. The policy servers' pods get
// their own account's token from the node agent (tooling/cluster/node-agent/tokens.ts) when
// their PolicyServer names POLICY_SERVER_ACCOUNT.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';
import { kubectl } from '../../tooling/cluster/cluster.ts';
import { adminApiTarget, ensurePki } from '../../tooling/cluster/pki.ts';
import { requestToken, tokenKubeconfig } from '../../tooling/cluster/node-agent/tokens.ts';
import { identityFiles, POLICY_SERVER_ACCOUNT } from '../../tooling/demo/identities.ts';
import type { Processes } from './driver.ts';
import { testCluster } from './kube.ts';
import type { RollcallProcess } from './rollcall.ts';

export { POLICY_SERVER_ACCOUNT };

/** The namespace deploy/ installs into, replaced by the test's. */
const DEPLOY_NAMESPACE = 'rollcall-system';
/** The tokens outlive any test file. */
const TOKEN_SECONDS = 6 * 3600;

interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  roleRef?: { kind: string; name: string };
  spec?: { policyName?: string };
}

/**
 * deploy/'s identity manifests for `namespace`: every `rollcall-system` becomes the namespace
 * (the accounts, the bindings' subjects, the usernames the guards test). What lives outside
 * the namespace (cluster roles and bindings, admission policies, the events Role in
 * `default`) gets the namespace as a suffix, so test files in other namespaces keep theirs.
 */
export function identityManifests(namespace: string): Manifest[] {
  const docs = identityFiles().flatMap((file) =>
    parseAllDocuments(readFileSync(file, 'utf8').replaceAll(DEPLOY_NAMESPACE, namespace))
      .map((d) => d.toJS() as Manifest | null)
      .filter((m): m is Manifest => m !== null),
  );
  if (namespace === DEPLOY_NAMESPACE) return docs;
  const shared = (m: Manifest) => m.metadata.namespace !== namespace;
  const id = (kind: string, name: string, ns = '') => `${kind}/${ns}/${name}`;
  const renamed = new Set(
    docs.filter(shared).map((m) => id(m.kind, m.metadata.name, m.metadata.namespace)),
  );
  const suffixed = (name: string) => `${name}-${namespace}`;
  for (const m of docs) {
    const ref = m.roleRef;
    if (ref) {
      const refNs = ref.kind === 'Role' ? m.metadata.namespace : undefined;
      if (renamed.has(id(ref.kind, ref.name, refNs))) ref.name = suffixed(ref.name);
    }
    const policy = m.spec?.policyName;
    if (m.kind === 'ValidatingAdmissionPolicyBinding' && policy !== undefined)
      if (renamed.has(id('ValidatingAdmissionPolicy', policy)))
        m.spec!.policyName = suffixed(policy);
    if (shared(m)) m.metadata.name = suffixed(m.metadata.name);
  }
  return docs;
}

/** rollcall's controllers' kubeconfigs in a test namespace, and how to take the grants back. */
export interface Identities {
  namespace: string;
  /** Kubeconfig files whose user is the account's token. */
  watcher: string;
  worker: string;
  /** Removes what lives outside the namespace (cluster roles, bindings, admission policies). */
  remove(): void;
}

/**
 * Applies deploy/'s accounts, RBAC and guards to `namespace` (which must exist, with the
 * CRDs) and mints the watcher's and the worker's tokens.
 */
export async function prepareIdentities(namespace: string): Promise<Identities> {
  const manifests = identityManifests(namespace);
  const cluster = testCluster();
  kubectl(cluster, ['apply', '-f', '-'], manifests.map((m) => stringify(m)).join('---\n'));
  const dir = mkdtempSync(join(tmpdir(), `rollcall-identities-${namespace}-`));
  const pki = ensurePki(join(cluster.dir, 'pki'));
  const admin = adminApiTarget(cluster.server, pki);
  const kubeconfigFor = async (account: string) => {
    const { token } = await requestToken(admin, namespace, account, { seconds: TOKEN_SECONDS });
    const file = join(dir, `${account}.kubeconfig`);
    const text = tokenKubeconfig({
      server: cluster.server,
      ca: { file: pki.caCert },
      user: account,
      namespace,
      token: { value: token },
    });
    writeFileSync(file, text, { mode: 0o600 });
    return file;
  };
  const outside = manifests.filter((m) => m.metadata.namespace !== namespace);
  return {
    namespace,
    watcher: await kubeconfigFor('rollcall-watcher'),
    worker: await kubeconfigFor('rollcall-worker'),
    remove() {
      rmSync(dir, { recursive: true, force: true });
      if (outside.length === 0) return;
      kubectl(
        cluster,
        ['delete', '--ignore-not-found', '--wait=false', '-f', '-'],
        outside.map((m) => stringify(m)).join('---\n'),
      );
    },
  };
}

/**
 * What `procs.run(args)` starts as the admin, as the two ServiceAccounts instead: a watcher
 * and a worker, each with its token's kubeconfig (`--kubeconfig` wins over KUBECONFIG).
 */
export function runAsAccounts(
  procs: Processes,
  ids: Identities,
  args: string[] = [],
): RollcallProcess[] {
  return [
    procs.watcher(undefined, ['--kubeconfig', ids.watcher, ...args]),
    procs.worker(['--kubeconfig', ids.worker, ...args]),
  ];
}
