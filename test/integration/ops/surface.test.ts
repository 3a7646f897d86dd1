// The ops surface of a running `rollcall run` with the simulated data plane: /metrics parsed
// as Prometheus text and moving when policies change, and, in headless Chromium, the queue UI
// behind basic auth and the status page showing a failing replica and a policy's audit (its
// failing objects, escaped, under the page's Content-Security-Policy). Screenshots go to
// test-results/.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { chromium, type Browser } from 'playwright-core';
import { GROUP, VERSION } from '../../../api/constants.ts';
import type { PolicyAudit } from '../../../api/v1alpha1.ts';
import { repoRoot } from '../../../tooling/cluster/paths.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import {
  createRule,
  policyManifest,
  policyServerManifest,
  SIM_IMAGE,
} from '../../support/manifests.ts';
import { get, waitFor } from '../../support/poll.ts';
import { parsePrometheusText, sumOf, type MetricFamily } from '../../support/prom-text.ts';
import {
  deleteRollcallObjects,
  startRollcall,
  startServing,
  testDb,
  type RollcallProcess,
  type ServingRollcall,
} from '../../support/rollcall.ts';
import {
  apply,
  isCurrent,
  isTrue,
  waitPolicy as watchPolicy,
  type PolicyObject,
} from '../../support/scenario.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-ops-ui';
const artifacts = join(repoRoot, 'test-results', 'ops');
const server = uniqueName('ops').slice(0, 40);
const failMessage = 'module download failed: 404 from the registry';

const policy = (name: string, module: string, settings: Record<string, unknown> = {}) =>
  policyManifest(name, server, { module, rules: [createRule('configmaps')], settings });
const waitPolicy = (name: string, done: (p: PolicyObject) => boolean) =>
  watchPolicy(kc, name, done, { timeoutMs: 45_000 });
const conditionTrue = (p: PolicyObject, type: string) => isCurrent(p) && isTrue(p, type);

let base: string;
let rollcall: ServingRollcall;
let sim: RollcallProcess;

async function scrape(): Promise<Map<string, MetricFamily>> {
  const res = await get(`${base}/metrics`);
  assert.equal(res?.status, 200);
  return parsePrometheusText(res.body);
}

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  rollcall = await startServing('ops-run', 'run', namespace, [
    '--ui-credentials',
    'admin:secret',
    '--install-crds',
  ]);
  base = rollcall.url('');
  sim = startRollcall('ops-sim', ['sim', '--namespace', namespace], { db: testDb() });
  await apply(policyServerManifest(server, { image: SIM_IMAGE, replicas: 2 }));
  await waitFor(
    async () => (await get(`${base}/readyz`))?.status === 200,
    30_000,
    'rollcall to be ready',
  );
});

after(async () => {
  await Promise.all([rollcall?.stop(), sim?.stop()]);
  await deleteRollcallObjects(kc);
});

describe('/metrics', () => {
  test('has every metric family the issue lists, and they move when policies change', async () => {
    await apply(policy('ops-good', 'sim://ok'));
    await waitPolicy('ops-good', (p) => Boolean(conditionTrue(p, 'Ready')));
    const before = await scrape();
    for (const family of [
      'rollcall_queue_runs_total',
      'rollcall_queue_run_duration_seconds',
      'rollcall_queue_depth',
      'rollcall_queue_adds_total',
      'rollcall_queue_coalesced_adds_total',
      'rollcall_kube_requests_total',
      'rollcall_kube_write_window',
      'rollcall_policy_status_latency_seconds',
      'rollcall_watch_restarts_total',
      'rollcall_watch_relists_total',
      'rollcall_watcher_leader',
      'process_cpu_user_seconds_total',
      'nodejs_eventloop_lag_seconds',
    ])
      assert.ok(before.has(family), `${family} missing`);
    assert.equal(sumOf(before, 'rollcall_watcher_leader'), 1);
    assert.ok(
      sumOf(before, 'rollcall_watch_relists_total', { resource: 'policy', reason: 'initial' }) >= 1,
    );

    // A spec change (new generation) of a Ready policy, then a failing one.
    await apply(policy('ops-good', 'sim://ok', { bump: 1 }));
    await waitPolicy(
      'ops-good',
      (p) => p.metadata.generation === 2 && Boolean(conditionTrue(p, 'Ready')),
    );
    await apply(policy('ops-bad', `sim://fail?message=${encodeURIComponent(failMessage)}`));
    await waitPolicy(
      'ops-bad',
      (p) => Boolean(conditionTrue(p, 'Stalled')) && (p.status?.failures?.length ?? 0) > 0,
    );
    const after = await scrape();

    const moved = (name: string, labels: Record<string, string> = {}) =>
      sumOf(after, name, labels) - sumOf(before, name, labels);
    assert.ok(
      moved('rollcall_queue_runs_total', { function: 'policy', outcome: 'done' }) >= 2,
      'policy runs',
    );
    assert.ok(
      moved('rollcall_queue_run_duration_seconds_count', { function: 'policy' }) >= 2,
      'run durations',
    );
    assert.ok(moved('rollcall_queue_adds_total', { function: 'policy' }) >= 2, 'adds');
    assert.ok(
      moved('rollcall_kube_requests_total', { verb: 'patch', code: '200' }) >= 2,
      'status patches',
    );
    assert.ok(
      moved('rollcall_kube_requests_total', { verb: 'create', code: '201' }) +
        moved('rollcall_kube_requests_total', { verb: 'create', code: '200' }) >=
        1,
      'Events',
    );
    assert.ok(
      moved('rollcall_policy_status_latency_seconds_count') >= 2,
      'convergence latency observed',
    );
    assert.ok(
      moved('rollcall_watch_events_total', { resource: 'policy', type: 'MODIFIED' }) >= 2,
      'watch events',
    );
  });
});

describe('the UIs in a browser', () => {
  let browser: Browser;
  before(async () => {
    browser = await chromium.launch({
      executablePath: process.env.ROLLCALL_CHROMIUM ?? '/usr/bin/chromium', // found or installed by test/run.ts
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      // playwright gives every launch a fresh temporary profile (it refuses --user-data-dir here).
    });
  });
  after(async () => browser?.close());

  test('/queues refuses without credentials', async () => {
    const page = await browser.newPage();
    const seen = page.waitForResponse(`${base}/queues`);
    // Headless Chromium cannot show the login prompt, so the navigation itself fails.
    await assert.rejects(page.goto(`${base}/queues`), /ERR_INVALID_AUTH_CREDENTIALS/);
    const res = await seen;
    assert.equal(res.status(), 401);
    assert.match((await res.allHeaders())['www-authenticate'] ?? '', /^Basic/);
    assert.equal((await get(`${base}/`))?.status, 401, 'the status page too');
    await page.close();
  });

  test('/queues lists the reconcile queue with credentials', async () => {
    const context = await browser.newContext({
      httpCredentials: { username: 'admin', password: 'secret' },
      viewport: { width: 1280, height: 800 },
    });
    const page = await context.newPage();
    const res = await page.goto(`${base}/queues`);
    assert.equal(res?.status(), 200);
    await page.getByText('reconcile', { exact: false }).first().waitFor({ timeout: 15_000 });
    await page.screenshot({ path: join(artifacts, 'queues.png'), fullPage: true });
    await context.close();
  });

  test('/ shows a policy’s MODE and audit: counts, its failing objects escaped, "and N more", where the Reports are', async () => {
    // A simulated policy is never audited (sim://), so the test writes status.audit as the
    // audit-summary function would, with strings no template may turn into markup.
    const name = 'ops-audited';
    await apply(
      policyManifest(name, server, {
        module: 'sim://ok',
        rules: [createRule('configmaps')],
        validationActions: ['Audit'],
      }),
    );
    await waitPolicy(
      name,
      (p) => Boolean(conditionTrue(p, 'Ready')) && p.status?.actions === 'Audit',
    );
    const hostile = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">';
    const audit: PolicyAudit = {
      generation: 1,
      checked: 100,
      failing: 30,
      errors: 0,
      completedAt: '2026-01-01T00:00:00Z',
      failures: Array.from({ length: 10 }, (_, i) => ({
        object: `ConfigMap shop/settings-${i}${i === 0 ? hostile : ''}`,
        message: i === 0 ? `</td></tr></table>${hostile}` : 'configmaps must not hold passwords',
      })),
    };
    await kc
      .makeApiClient(CustomObjectsApi)
      .patchClusterCustomObjectStatus(
        { group: GROUP, version: VERSION, plural: 'policies', name, body: { status: { audit } } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );

    const context = await browser.newContext({
      httpCredentials: { username: 'admin', password: 'secret' },
      viewport: { width: 1280, height: 800 },
    });
    const page = await context.newPage();
    const dialogs: string[] = [];
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    const row = page.locator(`tr[data-policy="${name}"]`);
    // The watcher's projection catches up with the status write: reload until it shows.
    await waitFor(
      async () => {
        await page.goto(`${base}/`);
        return (await row.locator('td[data-audit-failing="30"]').count()) === 1;
      },
      15_000,
      'the status page to show the audit',
    );
    assert.equal(await row.locator('td[data-actions]').innerText(), 'Audit');
    assert.match(await row.innerText(), /30 failing of\s+100/);
    const block = page.locator(`[data-audit-failures="${name}"]`);
    assert.equal(await block.locator('tr[data-failure]').count(), 10);
    assert.match(await block.innerText(), /and 20 more\./);
    assert.match(
      await block.innerText(),
      /kubectl get reports -A -l rollcall\.dev\/policy=ops-audited/,
    );
    // The hostile strings are text: shown as written, no element made of them, nothing run.
    assert.ok((await block.innerText()).includes(hostile));
    assert.equal(await page.locator('script, img').count(), 0);
    assert.equal(await page.evaluate(() => (globalThis as { pwned?: number }).pwned), undefined);
    assert.deepEqual(dialogs, []);
    await page.screenshot({ path: join(artifacts, 'status-audit.png'), fullPage: true });
    await context.close();
  });

  test('/ shows the failing policy’s replicas and message', async () => {
    await waitPolicy('ops-bad', (p) => Boolean(conditionTrue(p, 'Stalled')));
    const context = await browser.newContext({
      httpCredentials: { username: 'admin', password: 'secret' },
      viewport: { width: 1280, height: 800 },
    });
    const page = await context.newPage();
    const res = await page.goto(`${base}/`);
    assert.equal(res?.status(), 200);
    const row = page.locator('tr[data-policy="ops-bad"]');
    await row.waitFor({ timeout: 15_000 });
    assert.equal(await row.locator('td[data-state="Failed"]').count(), 2, 'both replicas failed');
    assert.match(await row.innerText(), /module download failed: 404 from the registry/);
    assert.match(await row.innerText(), /Stalled/);
    assert.match(
      await page.locator(`section[data-server="${server}"] > table > thead`).innerText(),
      new RegExp(`policy-server-${server}`),
    );
    assert.equal(
      await page.locator('tr[data-policy="ops-good"] td[data-state="Loaded"]').count(),
      2,
    );
    assert.equal(await page.locator('meta[http-equiv="refresh"]').count(), 1);
    await page.screenshot({ path: join(artifacts, 'status.png'), fullPage: true });
    await context.close();
  });
});
