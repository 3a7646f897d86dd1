// The operator UIs of a running `rollcall run --ui-local-only`, attacked from headless
// Chromium as an operator's browser would be: a page of another site that frames the queue UI
// (clickjacking an action), and a page whose name its attacker points at 127.0.0.1 (DNS
// rebinding: the browser then talks to the UI from loopback, under the attacker's origin).
// Both refused; and both pages still work under their Content-Security-Policy.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser, type ConsoleMessage } from 'playwright-core';
import { testKubeConfig } from '../../support/kube.ts';
import { get, waitFor } from '../../support/poll.ts';
import {
  deleteRollcallObjects,
  startServing,
  type ServingRollcall,
} from '../../support/rollcall.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-ops-ui-attacks';
/** The attacker's name, which Chromium resolves to 127.0.0.1 (its DNS answering so). */
const REBOUND = 'rebind.example';

let rollcall: ServingRollcall;
let base: string;
let attacker: Server;
let attackerBase: string;
let browser: Browser;

/** The console lines of a page that report a Content-Security-Policy or framing refusal. */
function refusals(messages: ConsoleMessage[]): string[] {
  return messages
    .map((m) => m.text())
    .filter((t) => /Content Security Policy|Refused to (frame|display|load|apply|execute)/.test(t));
}

before(async () => {
  rollcall = await startServing('ops-ui-attacks', 'run', namespace, [
    '--ui-local-only',
    '--install-crds',
  ]);
  base = rollcall.url('');
  await waitFor(
    async () => (await get(`${base}/readyz`))?.status === 200,
    30_000,
    'rollcall ready',
  );
  // Another site (another origin: another port) whose page frames the queue UI.
  attacker = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(
      `<!doctype html><title>win a prize</title><iframe id="ui" src="${base}/queues" width="800" height="600"></iframe>`,
    );
  });
  await new Promise<void>((r) => attacker.listen(0, '127.0.0.1', r));
  attackerBase = `http://127.0.0.1:${(attacker.address() as { port: number }).port}`;
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
      '--no-proxy-server',
      `--host-resolver-rules=MAP ${REBOUND} 127.0.0.1`,
    ],
  });
});

after(async () => {
  await browser?.close();
  attacker?.close();
  await rollcall?.stop();
  await deleteRollcallObjects(kc);
});

describe('the UIs in a browser, under attack', () => {
  test('Bull Board works under its Content-Security-Policy (only the Google Fonts stylesheet is refused)', async () => {
    const page = await browser.newPage();
    const messages: ConsoleMessage[] = [];
    page.on('console', (m) => messages.push(m));
    const res = await page.goto(`${base}/queues`);
    assert.equal(res?.status(), 200);
    const headers = await res!.allHeaders();
    assert.equal(headers['x-frame-options'], 'DENY');
    assert.match(headers['content-security-policy'] ?? '', /frame-ancestors 'none'/);
    await page.getByText('reconcile', { exact: false }).first().waitFor({ timeout: 15_000 });
    const others = refusals(messages).filter((t) => !t.includes('fonts.googleapis.com'));
    assert.deepEqual(others, [], 'nothing else of the page is refused');
    await page.close();
  });

  test('the status page works under it too, refused nothing', async () => {
    const page = await browser.newPage();
    const messages: ConsoleMessage[] = [];
    page.on('console', (m) => messages.push(m));
    const res = await page.goto(`${base}/`);
    assert.equal(res?.status(), 200);
    await page.getByRole('heading', { name: 'rollcall' }).waitFor({ timeout: 15_000 });
    assert.deepEqual(refusals(messages), []);
    await page.close();
  });

  test("another site's page cannot frame the queue UI (clickjacking)", async () => {
    const page = await browser.newPage();
    const messages: ConsoleMessage[] = [];
    page.on('console', (m) => messages.push(m));
    const framed = page.waitForResponse(`${base}/queues`);
    await page.goto(attackerBase);
    assert.equal((await framed).status(), 200, 'the UI answered the framed request');
    await waitFor(
      async () => refusals(messages).some((t) => /frame-ancestors|X-Frame-Options/.test(t)),
      10_000,
      'Chromium to refuse rendering the UI in the frame',
    );
    const frame = page.frames().find((f) => f !== page.mainFrame());
    assert.ok(frame, 'the frame exists');
    assert.notEqual(frame.url(), `${base}/queues`, 'the frame shows an error page, not the UI');
    await page.close();
  });

  test('a page under a name rebound to 127.0.0.1 gets no answer from the UIs (DNS rebinding)', async () => {
    const port = new URL(base).port;
    const page = await browser.newPage();
    for (const path of ['/', '/queues', '/queues/api/queues']) {
      const res = await page.goto(`http://${REBOUND}:${port}${path}`);
      assert.equal(res?.status(), 421, path);
      assert.match(await res!.text(), /answer to localhost, 127\.0\.0\.1 or \[::1\] only/);
    }
    // The same browser under a loopback name is served.
    assert.equal((await page.goto(`http://localhost:${port}/queues/api/queues`))?.status(), 200);
    await page.close();
  });
});
