// The status page at `/`: every PolicyServer with its replicas, and per server a matrix of
// its policies × its pods showing what each replica reported, each policy's validation actions
// and the audit of existing objects (its `status.audit`: counts and up to 10 failing objects).
// Read from the Redis projections the watcher keeps (two round trips per server), never from
// the API server, so a page view costs the cluster nothing. `statusModel` is pure;
// `renderStatusPage` only formats (hono's html escapes every value it interpolates).
import type { Hono } from 'hono';
import { html, raw } from 'hono/html';
import type { HtmlEscapedString } from 'hono/utils/html';
import { isPodReady, isTerminating } from '../../api/kube.ts';
import { policyReport, type ReportReading } from '../../api/report.ts';
import { POLICY_LABEL } from '../../api/constants.ts';
import {
  actionsOf,
  policySchema,
  policyServerSchema,
  type Policy,
  type PolicyAudit,
  type PolicyServer,
} from '../../api/v1alpha1.ts';
import { reportName } from '../functions/audit-core.ts';
import type { ProjectedPod } from '../projections/project.ts';
import type { ProjectionStore } from '../projections/store.ts';
import { queueLink } from './queue-ui.ts';

export type CellState = 'Loaded' | 'Loading' | 'Failed' | 'Stale' | 'Missing';

export interface Cell {
  state: CellState;
  /** What the replica said, or why its report could not be used. */
  message?: string;
}

export interface ReplicaColumn {
  pod: string;
  ready: boolean;
  terminating: boolean;
  /** Set when the pod's report is unreadable: every cell of the column is Failed with it. */
  reportError?: string;
}

/** A Policy's audit of the objects that exist, as its `status.audit` says it. */
export interface AuditView {
  /** The generation whose results these are. */
  generation: number;
  checked: number;
  failing: number;
  errors: number;
  /** When the first complete pass of `generation` ended; absent while it runs. */
  completedAt?: string;
  /** Some failing objects (the status keeps at most 10). */
  failures: { object: string; message: string }[];
  /** Failing objects not listed here: only the Reports name them. */
  more: number;
}

export interface PolicyRow {
  name: string;
  generation: number;
  /** `N/M` as the policy function last wrote it. */
  ready: string;
  summary: string;
  /** The validation actions (`Deny`, `Warn,Audit`): the MODE column of `kubectl get policies`. */
  actions: string;
  /** Absent until the audit-summary function first wrote it. */
  audit?: AuditView;
  cells: Cell[];
}

export interface ServerSection {
  name: string;
  ready: string;
  summary: string;
  replicas: ReplicaColumn[];
  policies: PolicyRow[];
}

export interface StatusModel {
  servers: ServerSection[];
  /** Policies naming a server that does not exist (yet). */
  orphans: { name: string; server: string; summary: string }[];
  /** Projections that failed schema validation, by name. */
  invalid: string[];
}

/** What one replica says about one policy, judged against the policy's current generation. */
export function cellFor(reading: ReportReading, policy: string, generation: number): Cell {
  const report = policyReport(reading, policy);
  if (report.kind === 'absent') return { state: 'Missing', message: 'no report yet' };
  if (report.kind === 'invalid') return { state: 'Failed', message: report.reason };
  const entry = report.entry;
  if (!entry) return { state: 'Missing', message: 'not in report' };
  if (entry.generation !== generation)
    return {
      state: 'Stale',
      message: `reported generation ${entry.generation}, current ${generation}`,
    };
  return entry.message ? { state: entry.state, message: entry.message } : { state: entry.state };
}

/** The page's view of a `status.audit`; undefined when there is none. */
export function auditView(audit: PolicyAudit | undefined): AuditView | undefined {
  if (!audit) return undefined;
  const failures = audit.failures ?? [];
  return {
    generation: audit.generation,
    checked: audit.checked,
    failing: audit.failing,
    errors: audit.errors ?? 0,
    ...(audit.completedAt && { completedAt: audit.completedAt }),
    failures,
    more: Math.max(0, audit.failing - failures.length),
  };
}

/** What the status says (the policy function writes it), else what the spec says. */
const actionsText = (p: Policy) => p.status?.actions ?? actionsOf(p.spec).join(',');

const summaryOf = (obj: Policy | PolicyServer) =>
  obj.status?.summary ??
  (obj.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True'
    ? 'Ready'
    : 'Unknown');

/** Builds the page's model from raw projections. Pure. */
export function statusModel(
  rawPolicies: unknown[],
  rawServers: unknown[],
  podsByServer: ReadonlyMap<string, readonly ProjectedPod[]>,
): StatusModel {
  const invalid: string[] = [];
  const parseAll = <T extends { metadata: { name: string } }>(
    raws: unknown[],
    schema: { safeParse(v: unknown): { success: true; data: T } | { success: false } },
  ): T[] =>
    raws.flatMap((raw) => {
      const parsed = schema.safeParse(raw);
      if (parsed.success) return [parsed.data];
      invalid.push((raw as { metadata?: { name?: string } } | null)?.metadata?.name ?? '(unnamed)');
      return [];
    });
  const policies = parseAll<Policy>(rawPolicies, policySchema).sort((a, b) =>
    a.metadata.name.localeCompare(b.metadata.name),
  );
  const servers = parseAll<PolicyServer>(rawServers, policyServerSchema).sort((a, b) =>
    a.metadata.name.localeCompare(b.metadata.name),
  );
  const serverNames = new Set(servers.map((s) => s.metadata.name));

  const sections = servers.map((server): ServerSection => {
    const name = server.metadata.name;
    const pods = [...(podsByServer.get(name) ?? [])].sort((a, b) =>
      (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''),
    );
    const reports = pods.map((p) => p.report);
    const replicas = pods.map((pod, i): ReplicaColumn => {
      const report = reports[i]!;
      return {
        pod: pod.metadata?.name ?? '',
        ready: isPodReady(pod),
        terminating: isTerminating(pod.metadata),
        ...(report.kind === 'invalid' ? { reportError: report.reason } : {}),
      };
    });
    const rows = policies
      .filter((p) => p.spec.policyServer === name)
      .map((p): PolicyRow => {
        const generation = p.metadata.generation ?? 0;
        const audit = auditView(p.status?.audit);
        return {
          name: p.metadata.name,
          generation,
          ready:
            p.status?.ready ??
            `${p.status?.readyReplicas ?? 0}/${p.status?.replicas ?? server.spec.replicas ?? 0}`,
          summary: summaryOf(p),
          actions: actionsText(p),
          ...(audit && { audit }),
          cells: reports.map((r) => cellFor(r, p.metadata.name, generation)),
        };
      });
    return {
      name,
      ready:
        server.status?.ready ?? `${server.status?.readyReplicas ?? 0}/${server.spec.replicas ?? 0}`,
      summary: summaryOf(server),
      replicas,
      policies: rows,
    };
  });
  const orphans = policies
    .filter((p) => !serverNames.has(p.spec.policyServer))
    .map((p) => ({ name: p.metadata.name, server: p.spec.policyServer, summary: summaryOf(p) }));
  return { servers: sections, orphans, invalid };
}

/** Reads the projections: one HVALS per kind and one per server. */
async function loadStatusModel(store: ProjectionStore): Promise<StatusModel> {
  const [policies, servers] = await Promise.all([store.all('policy'), store.all('policyserver')]);
  const names = servers
    .map((s) => (s as { metadata?: { name?: string } }).metadata?.name)
    .filter((n): n is string => Boolean(n));
  const pods = new Map(
    await Promise.all(names.map(async (n) => [n, await store.podsOf(n)] as const)),
  );
  return statusModel(policies, servers, pods);
}

const styles = `
body{font:14px system-ui,sans-serif;margin:1.5rem;color:#222}
h1{font-size:1.3rem}h2{font-size:1.1rem;margin-top:2rem}h3{font-size:1rem;margin:1rem 0 0}
table{border-collapse:collapse;margin:.5rem 0}th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}.Loaded,.Ready{color:#17692c}.Loading,.Reconciling,.Stale{color:#8a6100}.Failed,.Stalled{color:#b00020;font-weight:600}
.Missing,.Unknown{color:#777}.msg{display:block;font-weight:400;max-width:28rem;white-space:pre-wrap}small{color:#666}.sub{display:block;font-weight:400}`;

function cellHtml(cell: Cell): HtmlEscapedString | Promise<HtmlEscapedString> {
  return html`<td class="${cell.state}" data-state="${cell.state}">
    ${cell.state}${cell.message ? html`<span class="msg">${cell.message}</span>` : ''}
  </td>`;
}

/** The audit's counts: over the objects the policy's rules match, at `generation`. */
function auditCellHtml(audit: AuditView | undefined) {
  if (!audit) return html`<td class="Unknown" data-audit="none">not audited</td>`;
  const state = audit.failing > 0 || audit.errors > 0 ? 'Failed' : 'Ready';
  const progress = `gen ${audit.generation} · ${audit.completedAt ? `pass complete ${audit.completedAt}` : 'first pass running'}`;
  return html`<td
    class="${state}"
    data-audit-checked="${audit.checked}"
    data-audit-failing="${audit.failing}"
    data-audit-errors="${audit.errors}"
  >
    ${audit.failing} failing of
    ${audit.checked}${audit.errors > 0 ? html`, ${audit.errors} errors` : ''}
    <small class="sub">${progress}</small>
  </td>`;
}

/** A policy's failing objects, and where the rest (and the errors) are: its Reports. */
function failuresHtml(p: PolicyRow) {
  const audit = p.audit!;
  const report = reportName(p.name);
  const failures = html`<table>
    <thead>
      <tr>
        <th>object</th>
        <th>message</th>
      </tr>
    </thead>
    <tbody>
      ${audit.failures.map(
        (f) =>
          html`<tr data-failure>
            <td>${f.object}</td>
            <td><span class="msg">${f.message}</span></td>
          </tr>`,
      )}
    </tbody>
  </table>`;
  return html`<div class="failures" data-audit-failures="${p.name}">
    <h3>
      ${p.name}: ${audit.failing} failing
      object${audit.failing === 1 ? '' : 's'}${
        audit.errors > 0 ? html`, ${audit.errors} not judged (error)` : ''
      }
      <small>generation ${audit.generation}</small>
    </h3>
    ${audit.failures.length > 0 ? failures : ''}
    <p>
      ${audit.more > 0 ? html`<span data-more="${audit.more}">and ${audit.more} more.</span>` : ''}
      Every result is in the OpenReports Report <code>${report}</code> of each namespace
      (cluster-scoped objects: the ClusterReport <code>${report}</code>):
      <code>kubectl get reports -A -l ${POLICY_LABEL}=${p.name}</code>,
      <code>kubectl get report ${report} -n NAMESPACE -o yaml</code>.
    </p>
  </div>`;
}

function serverHtml(s: ServerSection, queueName: string) {
  const replicaHead = s.replicas.map(
    (r) =>
      html`<th>
        ${r.pod}<br /><small
          >${r.terminating ? 'terminating' : r.ready ? 'ready' : 'not ready'}${r.reportError ? ' · bad report' : ''}</small
        >
      </th>`,
  );
  const rows = s.policies.map(
    (p) =>
      html`<tr data-policy="${p.name}">
        <th>${p.name} <small>gen ${p.generation}</small></th>
        <td class="${p.summary}">${p.summary}</td>
        <td>${p.ready}</td>
        <td data-actions="${p.actions}">${p.actions}</td>
        ${auditCellHtml(p.audit)} ${p.cells.map(cellHtml)}
        <td>
          <a href="${queueLink(queueName, p.summary === 'Stalled' ? 'failed' : 'latest')}">jobs</a>
        </td>
      </tr>`,
  );
  return html`<section data-server="${s.name}">
    <h2>
      PolicyServer ${s.name} <span class="${s.summary}">${s.summary}</span>
      <small>READY ${s.ready}</small>
    </h2>
    ${s.replicas.length === 0 ? html`<p>No pods.</p>` : ''}
    ${
      s.policies.length === 0
        ? html`<p>No policies.</p>`
        : html`<table>
            <thead>
              <tr>
                <th>policy</th>
                <th>status</th>
                <th>READY</th>
                <th>MODE</th>
                <th>audit</th>
                ${replicaHead}
                <th>queue</th>
              </tr>
            </thead>
            <tbody>
              ${rows}
            </tbody>
          </table>`
    }
    ${s.policies
      .filter((p) => (p.audit?.failing ?? 0) > 0 || (p.audit?.errors ?? 0) > 0)
      .map(failuresHtml)}
  </section>`;
}

export function renderStatusPage(
  model: StatusModel,
  opts: { queueName: string; refreshSeconds: number; now: Date },
) {
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta http-equiv="refresh" content="${opts.refreshSeconds}" />
        <title>rollcall status</title>
        <style>
          ${raw(styles)}
        </style>
      </head>
      <body>
        <h1>rollcall</h1>
        <p>
          <small
            >as of ${opts.now.toISOString()} · refreshes every ${opts.refreshSeconds}s ·
            <a href="${queueLink(opts.queueName, 'latest')}">queue</a> ·
            <a href="/metrics">metrics</a></small
          >
        </p>
        ${model.servers.length === 0 ? html`<p>No PolicyServers.</p>` : model.servers.map((s) => serverHtml(s, opts.queueName))}
        ${
          model.orphans.length
            ? html`<h2>Policies without a server</h2>
                <ul>
                  ${model.orphans.map((o) => html`<li>${o.name} → ${o.server} (<span class="${o.summary}">${o.summary}</span>)</li>`)}
                </ul>`
            : ''
        }
        ${model.invalid.length ? html`<p class="Failed">Unreadable projections: ${model.invalid.join(', ')}</p>` : ''}
      </body>
    </html>`;
}

export function mountStatusPage(
  app: Hono,
  store: ProjectionStore,
  queueName: string,
  refreshSeconds = 5,
): void {
  app.get('/', async (c) => {
    if (!(await store.isSynced()))
      return c.text('projections not synced yet (is the watcher leading?)', 503);
    const model = await loadStatusModel(store);
    return c.html(renderStatusPage(model, { queueName, refreshSeconds, now: new Date() }));
  });
}
