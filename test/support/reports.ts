// The continuous audit as end-to-end tests read it: a Policy's OpenReports Report (or
// ClusterReport) and its results as sorted lines a deepEqual can diff, waits through watches,
// the policy servers' audit evaluation counts summed over replicas, and the admission warnings
// kubectl printed.
import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
import { OPENREPORTS_API_VERSION, type OpenReport } from '../../api/audit.ts';
import { MANAGED_BY, MANAGED_BY_LABEL, POLICY_LABEL } from '../../api/constants.ts';
import { getJson, kubeConfigTarget } from '../../lib/kube/api.ts';
import { httpsRequest } from './https.ts';
import { watchUntil } from './kube.ts';
import { sumOf, parsePrometheusText } from './prom-text.ts';
import { until, type KubectlRun, type ReplicaProcess, type ReplicaTls } from './scenario.ts';

export type ReportObject = OpenReport & KubernetesObject;

/** The metric the policy server counts each audited object × Policy in. */
export const AUDIT_EVALUATIONS = 'rollcall_policy_server_audit_evaluations_total';

/** The Reports of `namespace`, or the ClusterReports when it is undefined. */
export const reportsPath = (namespace: string | undefined) =>
  namespace === undefined
    ? `/apis/${OPENREPORTS_API_VERSION}/clusterreports`
    : `/apis/${OPENREPORTS_API_VERSION}/namespaces/${namespace}/reports`;

/** Every Report rollcall wrote in `namespace` (undefined: its ClusterReports), by name. */
export async function rollcallReports(
  kc: KubeConfig,
  namespace: string | undefined,
): Promise<Map<string, ReportObject>> {
  const list = (await getJson(kubeConfigTarget(kc), reportsPath(namespace), {
    labelSelector: `${MANAGED_BY_LABEL}=${MANAGED_BY}`,
  })) as { items: ReportObject[] };
  return new Map(list.items.map((r) => [r.metadata.name, r]));
}

/** Every Report and ClusterReport rollcall wrote for `policy`, as `Kind namespace/name`. */
export async function reportsOfPolicy(kc: KubeConfig, policy: string): Promise<string[]> {
  const target = kubeConfigTarget(kc);
  const selector = { labelSelector: `${MANAGED_BY_LABEL}=${MANAGED_BY},${POLICY_LABEL}=${policy}` };
  const [namespaced, cluster] = (await Promise.all([
    getJson(target, `/apis/${OPENREPORTS_API_VERSION}/reports`, selector),
    getJson(target, reportsPath(undefined), selector),
  ])) as { items: ReportObject[] }[];
  return [...namespaced!.items, ...cluster!.items].map(
    (r) => `${r.kind} ${r.metadata.namespace ? `${r.metadata.namespace}/` : ''}${r.metadata.name}`,
  );
}

/**
 * Watches the Report `name` of `namespace` (undefined: the ClusterReport) until `done` holds
 * for it (`undefined`: it does not exist, or was deleted), and resolves with it.
 */
export async function waitReport(
  kc: KubeConfig,
  namespace: string | undefined,
  name: string,
  done: (report: ReportObject | undefined) => boolean,
  timeoutMs = 60_000,
): Promise<ReportObject | undefined> {
  const path = reportsPath(namespace);
  // A CRD just established answers 429 for a moment, while its storage initializes.
  const list = await until(
    `a list of ${path}`,
    () =>
      getJson(kubeConfigTarget(kc), path, { fieldSelector: `metadata.name=${name}` }) as Promise<{
        metadata: { resourceVersion: string };
        items: ReportObject[];
      }>,
    { timeoutMs: 30_000, everyMs: 250 },
  );
  const now = list.items[0];
  if (done(now)) return now;
  let last: ReportObject | undefined = now;
  try {
    const seen = await watchUntil<ReportObject>(
      kc,
      path,
      (report, phase) => {
        last = phase === 'DELETED' ? undefined : report;
        return done(last);
      },
      {
        fieldSelector: `metadata.name=${name}`,
        resourceVersion: list.metadata.resourceVersion,
        timeoutMs,
      },
    );
    return last === undefined ? undefined : seen;
  } catch (err) {
    throw new Error(
      `${namespace ?? 'cluster'}/${name}: ${(err as Error).message.split(';')[0]}; last seen: ${describeReport(last)}`,
    );
  }
}

/** The summary and the first results of a Report, for a failure message. */
export function describeReport(report: ReportObject | undefined): string {
  if (!report) return 'no Report';
  return `summary ${JSON.stringify(report.summary)}, ${report.results?.length ?? 0} results: ${resultLines(report).slice(0, 12).join(' | ')}`;
}

/**
 * Each result of a Report as a line `<namespace>/<name> <result> [<message>] @<generation>`
 * (cluster-scoped: `<name> …`), sorted: two Reports with the same lines say the same thing.
 */
export function resultLines(report: ReportObject | undefined): string[] {
  return (report?.results ?? [])
    .map((r) => {
      const o = r.resources[0];
      const at = o?.namespace ? `${o.namespace}/${o.name}` : `${o?.name}`;
      const message = r.message ? ` [${r.message}]` : '';
      return `${at} ${r.result}${message} @${r.properties?.generation ?? '?'}`;
    })
    .sort();
}

/** The names of the objects a Report lists with `result`, sorted. */
export const namesWith = (report: ReportObject | undefined, result: string): string[] =>
  (report?.results ?? [])
    .filter((r) => r.result === result)
    .map((r) => r.resources[0]?.name ?? '')
    .sort();

/** The Report's summary without the zero counts (`{fail: 30, pass: 70}`), for deepEqual. */
export const nonZero = (report: ReportObject | undefined): Record<string, number> =>
  Object.fromEntries(Object.entries(report?.summary ?? {}).filter(([, n]) => n !== 0));

// ---------------------------------------------------------------- the policy servers' counts

/** One replica's /metrics (on its HTTPS port, as the kubelet would scrape it). */
export async function replicaMetrics(port: number, tls: ReplicaTls): Promise<string> {
  const { status, body } = await httpsRequest({
    host: '127.0.0.1',
    port,
    path: '/metrics',
    method: 'GET',
    ca: tls.ca,
    servername: tls.servername,
    agent: false,
    timeout: 10_000,
  });
  if (status !== 200) throw new Error(`GET /metrics on port ${port} answered ${status}: ${body}`);
  return body;
}

/** How many object × `policy` pairs the replicas judged for the audit, summed over them. */
export async function auditEvaluations(
  replicas: readonly ReplicaProcess[],
  tls: ReplicaTls,
  policy: string,
): Promise<number> {
  const texts = await Promise.all(replicas.map((r) => replicaMetrics(r.port, tls)));
  return texts.reduce(
    (n, text) => n + sumOf(parsePrometheusText(text), AUDIT_EVALUATIONS, { policy }),
    0,
  );
}

// ---------------------------------------------------------------- kubectl's warnings

/** The `Warning: …` lines kubectl printed, without the prefix. */
export const kubectlWarnings = (run: KubectlRun): string[] =>
  run.stderr
    .split('\n')
    .filter((l) => l.startsWith('Warning: '))
    .map((l) => l.slice('Warning: '.length));
