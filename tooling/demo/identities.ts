// rollcall under its own identities, as in a cluster: deploy/'s ServiceAccounts, RBAC and
// guards (ValidatingAdmissionPolicies) applied, the watcher and the worker running with
// tokens of their accounts (renewed, as a kubelet renews a pod's), the policy servers with
// their pods' tokens from the node agent. The last step proves it: each account tries what
// it must not do, with a token of its own, and the demo prints who refused it.
import { existsSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION } from '../../api/constants.ts';
import { credentialsTarget, KubeApiError, requestJson } from '../../lib/kube/api.ts';
import { errorText } from '../../lib/kube/errors.ts';
import { kubectl, type ClusterState } from '../cluster/cluster.ts';
import { RenewedToken, tokenKubeconfig, writePrivate } from '../cluster/node-agent/tokens.ts';
import { repoRoot } from '../cluster/paths.ts';
import { adminApiTarget, ensurePki } from '../cluster/pki.ts';
import { GOOD, NAMESPACE, SERVER, SERVER_PODS, need, tryKubectl, type Demo } from './context.ts';

/** What deploy/ grants and guards, in the order they apply; a guard not written yet is skipped. */
export const IDENTITY_FILES = ['rbac.yaml', 'guard-identities.yaml', 'guard-policyservers.yaml'];
/** The account PolicyServers name for the policy servers' rights (deploy/rbac.yaml). */
export const POLICY_SERVER_ACCOUNT = 'rollcall-policy-server';
/** A webhook configuration that is not rollcall's, for the worker to try. */
const FOREIGN_WEBHOOKS = 'someone-elses-webhooks';

/** The identity files that exist, as paths. */
export function identityFiles(): string[] {
  return IDENTITY_FILES.map((f) => join(repoRoot, 'deploy', f)).filter((f) => existsSync(f));
}

/** Applies deploy/'s accounts, RBAC and guards (rollcall's namespace must exist). */
export function grantIdentities(demo: Demo): void {
  const cluster = need(demo, 'cluster');
  const files = identityFiles();
  const missing = IDENTITY_FILES.filter((f) => !files.some((p) => p.endsWith(`/${f}`)));
  if (missing.length > 0)
    demo.progress(`not in deploy/ (yet), so not applied: ${missing.join(', ')}`);
  demo.progress(`applying ${files.map((f) => relative(repoRoot, f)).join(', ')}`);
  kubectl(cluster, ['apply', ...files.flatMap((f) => ['-f', f])]);
}

/**
 * A kubeconfig whose user is `account` of rollcall's namespace, by a token the demo keeps
 * renewed in a file (0600) until it stops.
 */
export async function accountKubeconfig(demo: Demo, account: string): Promise<string> {
  const cluster = need(demo, 'cluster');
  const pki = ensurePki(join(cluster.dir, 'pki'));
  const dir = join(demo.dir, 'demo', 'identities');
  const file = join(dir, `${account}.token`);
  const token = new RenewedToken({
    api: adminApiTarget(cluster.server, pki),
    namespace: NAMESPACE,
    account,
    file,
    log: demo.progress,
  });
  await demo.guard(token.start());
  demo.onExit(`the token of ${account}`, async () => token.stop());
  return writeKubeconfig(cluster, account, join(dir, `${account}.kubeconfig`), { file });
}

/** Writes (0600) a kubeconfig of rollcall's namespace whose user is `account`, by `token`. */
function writeKubeconfig(
  cluster: ClusterState,
  account: string,
  kubeconfig: string,
  token: { value: string } | { file: string },
): string {
  const pki = ensurePki(join(cluster.dir, 'pki'));
  const text = tokenKubeconfig({
    server: cluster.server,
    ca: { file: pki.caCert },
    user: account,
    namespace: NAMESPACE,
    token,
  });
  writePrivate(kubeconfig, text);
  return kubeconfig;
}

/** One try: a request an account sends (a write as a server-side dry run), and whether its job allows it. */
interface Attempt {
  what: string;
  method: 'GET' | 'PATCH' | 'POST';
  path: string;
  body?: object;
  /** A PATCH's kind: a merge patch unless given. */
  patch?: 'strategic';
  allowed: boolean;
}

/** Who turned a request down, from the apiserver's message (as kubectl prints it). */
export function refusedBy(output: string): string {
  const policy = /ValidatingAdmissionPolicy '([^']+)'/.exec(output);
  if (policy) return `refused by ValidatingAdmissionPolicy ${policy[1]}`;
  if (/is forbidden: User "[^"]*" cannot/.test(output)) return 'refused by RBAC';
  const webhook = /admission webhook "([^"]+)"/.exec(output);
  if (webhook) return `refused by webhook ${webhook[1]}`;
  return `refused: ${output.trim().split('\n')[0]?.slice(0, 160) ?? ''}`;
}

/**
 * `kubectl create token` for each of rollcall's accounts, and what each must not do tried
 * with it: each request sent as is (no read first, as kubectl would do), writes as
 * server-side dry runs (RBAC and admission judge them, nothing is stored). A refusal that
 * does not come, or an allowed request that is refused, fails the step.
 */
export async function showLeastPrivilege(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  const pods = serverPods(cluster);
  if (pods.length < 2) throw new Error(`expected the replicas of ${SERVER}, found ${pods.length}`);
  const [own, other] = pods as [ServerPod, ServerPod];
  const podPath = (name: string) => `/api/v1/namespaces/${NAMESPACE}/pods/${name}`;
  const report = { metadata: { annotations: { [REPORT_ANNOTATION]: own.report } } };
  kubectl(cluster, ['apply', '-f', '-'], JSON.stringify(foreignWebhooks()));
  demo.onExit(FOREIGN_WEBHOOKS, async () => {
    tryKubectl(cluster, ['delete', 'validatingwebhookconfiguration', FOREIGN_WEBHOOKS]);
  });
  const webhooks = (name: string) =>
    `/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/${name}`;
  const annotate = { metadata: { annotations: { 'rollcall.dev/demo': 'tried' } } };

  demo.out(
    "Least privilege: each of rollcall's accounts tries what it must not do, with its own token.\n",
  );
  const bound = [
    '--bound-object-kind=Pod',
    `--bound-object-name=${own.name}`,
    `--bound-object-uid=${own.uid}`,
  ];
  await tryAs(
    demo,
    POLICY_SERVER_ACCOUNT,
    bound,
    `a replica's token, bound to its pod ${own.name}`,
    [
      {
        what: "patch its own pod's report annotation (its job)",
        method: 'PATCH',
        path: podPath(own.name),
        body: report,
        allowed: true,
      },
      {
        what: `patch the report annotation of another pod (${other.name})`,
        method: 'PATCH',
        path: podPath(other.name),
        body: report,
        allowed: false,
      },
      {
        what: "patch its own pod's labels",
        method: 'PATCH',
        path: podPath(own.name),
        body: { metadata: { labels: { [POLICY_SERVER_LABEL]: 'other' } } },
        allowed: false,
      },
      {
        what: "patch its own pod's image",
        method: 'PATCH',
        path: podPath(own.name),
        body: { spec: { containers: [{ name: own.container, image: 'registry.example/evil:1' }] } },
        patch: 'strategic',
        allowed: false,
      },
      {
        what: 'read Secret rollcall-webhook-ca (the webhook CA key)',
        method: 'GET',
        path: `/api/v1/namespaces/${NAMESPACE}/secrets/rollcall-webhook-ca`,
        allowed: false,
      },
    ],
  );
  await tryAs(demo, 'rollcall-worker', [], "the worker's token", [
    {
      what: `patch rollcall's webhook configuration rollcall-${GOOD} (its job)`,
      method: 'PATCH',
      path: webhooks(`rollcall-${GOOD}`),
      body: annotate,
      allowed: true,
    },
    {
      what: `patch ValidatingWebhookConfiguration ${FOREIGN_WEBHOOKS}, not rollcall's`,
      method: 'PATCH',
      path: webhooks(FOREIGN_WEBHOOKS),
      body: annotate,
      allowed: false,
    },
  ]);
  const stolen = (spec: object) => ({
    method: 'POST' as const,
    path: '/apis/rollcall.dev/v1alpha1/policyservers',
    body: {
      apiVersion: 'rollcall.dev/v1alpha1',
      kind: 'PolicyServer',
      metadata: { name: 'stolen' },
      spec: { replicas: 1, ...spec },
    },
  });
  await tryAs(demo, undefined, [], 'whoever may write PolicyServers, here the admin', [
    {
      what: 'create a PolicyServer with serviceAccountName rollcall-worker',
      ...stolen({ serviceAccountName: 'rollcall-worker' }),
      allowed: false,
    },
    {
      what: 'create a PolicyServer with an env secretKeyRef to rollcall-webhook-ca',
      ...stolen({
        env: [
          {
            name: 'CA',
            valueFrom: { secretKeyRef: { name: 'rollcall-webhook-ca', key: 'ca.key' } },
          },
        ],
      }),
      allowed: false,
    },
  ]);
  demo.out();
}

/** Sends the attempts as `account` (a fresh `kubectl create token`), or as the admin; prints a line each. */
async function tryAs(
  demo: Demo,
  account: string | undefined,
  tokenArgs: string[],
  who: string,
  attempts: Attempt[],
): Promise<void> {
  const cluster = need(demo, 'cluster');
  const pki = ensurePki(join(cluster.dir, 'pki'));
  let api = adminApiTarget(cluster.server, pki);
  if (account) {
    const create = ['create', 'token', account, '-n', NAMESPACE, '--duration=10m', ...tokenArgs];
    demo.out(`$ kubectl ${create.join(' ')}`);
    const token = kubectl(cluster, create).trim();
    api = credentialsTarget({ server: cluster.server, ca: readFileSync(pki.caCert), token });
  }
  demo.out(`  as ${account ?? 'the admin'} (${who}):`);
  for (const a of attempts) {
    const write = a.method !== 'GET';
    const refusal = await requestJson(api, a.method, a.path, {
      body: a.body,
      ...(write && { query: { dryRun: 'All' } }),
      ...(a.method === 'PATCH' && {
        contentType: `application/${a.patch === 'strategic' ? 'strategic-merge-patch' : 'merge-patch'}+json`,
      }),
      signal: AbortSignal.timeout(10_000),
    }).then(
      () => undefined,
      (err: unknown) =>
        err instanceof KubeApiError ? (err.status?.message ?? err.message) : errorText(err),
    );
    demo.out(`  - ${a.what}: ${refusal === undefined ? 'allowed' : refusedBy(refusal)}`);
    if ((refusal === undefined) !== a.allowed)
      throw new Error(
        `as ${account ?? 'the admin'}, "${a.what}" was ${refusal === undefined ? 'allowed' : `refused (${refusal})`}, but it should have been ${a.allowed ? 'allowed' : 'refused'}`,
      );
  }
}

interface ServerPod {
  name: string;
  uid: string;
  container: string;
  report: string;
}

/** The live pods of the demo's PolicyServer. */
function serverPods(cluster: ClusterState): ServerPod[] {
  const list = JSON.parse(kubectl(cluster, ['get', ...SERVER_PODS, '-o', 'json'])) as {
    items: {
      metadata: {
        name: string;
        uid: string;
        deletionTimestamp?: string;
        annotations?: Record<string, string>;
      };
      spec: { containers: { name: string }[] };
    }[];
  };
  return list.items
    .filter((p) => !p.metadata.deletionTimestamp)
    .map((p) => ({
      name: p.metadata.name,
      uid: p.metadata.uid,
      container: p.spec.containers[0]?.name ?? 'policy-server',
      report: p.metadata.annotations?.[REPORT_ANNOTATION] ?? '{}',
    }));
}

/** A webhook configuration someone else installed: no webhooks, just an object to protect. */
function foreignWebhooks() {
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingWebhookConfiguration',
    metadata: {
      name: FOREIGN_WEBHOOKS,
      labels: { 'app.kubernetes.io/managed-by': 'someone-else' },
    },
    webhooks: [],
  };
}
