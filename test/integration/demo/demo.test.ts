// `rollcall demo --once` from a clean state, as CI runs it: its own cluster in a temp dir
// (not the test run's cluster) and its own Redis, and the output a newcomer reads.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../../tooling/cluster/paths.ts';

test(
  'npm run demo -- --once shows real policy servers: a CEL policy Ready 3/3 that denies a request, a CEL typo, a 404 source and a digest mismatch Stalled with their errors, a policy adopted over existing ConfigMaps (Audit with its Report and audit log annotation, Warn, Deny), and each account refused what it must not do',
  { timeout: 240_000 },
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'rollcall-demo-'));
    // The demo must start its own Redis and cluster, whatever the test run's environment says.
    const { REDIS_URL: _redis, ROLLCALL_LOCAL_DIR: _dir, KUBECONFIG: _kc, ...env } = process.env;
    const child = spawn(
      process.execPath,
      [join(repoRoot, 'cli', 'rollcall.ts'), 'demo', '--once', '--dir', dir],
      {
        cwd: repoRoot,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
        // On a test timeout, SIGTERM lets the demo stop its cluster, Redis and children.
        signal: t.signal,
        killSignal: 'SIGTERM',
      },
    );
    child.on('error', () => {}); // the abort on timeout; the test already failed
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    try {
      const context = `stdout:\n${stdout}\nstderr:\n${stderr}`;
      assert.equal(code, 0, context);
      // The last line naming the policy: its row in the `kubectl get` table (not `apply`'s).
      const row = (name: string) =>
        stdout.split('\n').findLast((l) => l.includes(`policy.rollcall.dev/${name} `)) ?? '';
      assert.match(stdout, /policyserver\.rollcall\.dev\/default\s+3\s+3\/3\s+Ready/, context);
      assert.match(row('require-labels'), /\s3\/3\s+Ready\s/, context);
      // Real failures, each with what the replicas said.
      assert.match(
        row('deny-latest-tag'),
        /\s0\/3\s+Stalled\s.*404.*\(and 2 more replicas\)/,
        context,
      );
      assert.match(
        row('limit-replicas'),
        /\s0\/3\s+Stalled\s.*spec\.validations\[0\]\.expression: .*'param'.* at \d+:\d+/,
        context,
      );
      assert.match(
        row('require-probes'),
        /\s0\/3\s+Stalled\s.*does not match spec\.source\.sha256 [0-9a-f]{64}/,
        context,
      );
      // Three real processes, one per pod.
      const processes = stdout.match(
        /^ {2}policy-server-default-\S+ +pid \d+ +https:\/\/127\.0\.0\.1:\d+$/gm,
      );
      assert.equal(processes?.length, 3, context);
      assert.match(
        stdout,
        /admission webhook "require-labels\.[^"]*" denied the request: pods in the demo namespace need an owner label/,
        context,
      );
      assert.match(stdout, /deployment\.apps\/web created/, context);
      // The audit: 5 ConfigMaps existed before the policy (kube-root-ca.crt included), 2 hold
      // a password; VIOLATIONS, the Report's columns and its results say exactly that.
      const audited = 'no-passwords-in-configmaps';
      const message = 'ConfigMaps must not hold passwords: use a Secret';
      assert.match(stdout, new RegExp(`\\n  ${audited} +default +Audit +3/3 +Ready +2 `), context);
      const reportRow = (pass: number, fail: number, warn: number) =>
        new RegExp(`rollcall-${audited} +${pass} +${fail} +${warn} +0 +0 `);
      assert.match(
        stdout,
        /\n  rollcall-demo +rollcall-no-passwords-in-configmaps +3 +2 +0 +0 +0 /,
        context,
      );
      for (const name of ['db-config', 'smtp-config'])
        assert.match(stdout, new RegExp(`\\n  ${name}\\tfail\\t${message}\\n`), context);
      for (const name of ['app-settings', 'feature-flags', 'kube-root-ca.crt'])
        assert.match(stdout, new RegExp(`\\n  ${name}\\tpass\\t?\\n`), context);
      // Audit: admitted silently, and the apiserver's audit log holds the annotation.
      assert.match(
        stdout,
        /\$ kubectl create configmap cache-config .*\n  configmap\/cache-config created\n/,
        context,
      );
      assert.match(
        stdout,
        new RegExp(
          `${audited}\\.policies\\.rollcall\\.dev/validation_failure: \\[\\{"message":"${message}","policy":"${audited}","generation":1,"validationActions":\\["Audit"\\]\\}\\]`,
        ),
        context,
      );
      // Warn: kubectl's Warning line, admitted; the new generation's audit reports `warn`.
      assert.match(
        stdout,
        new RegExp(`\\n  Warning: .*${message}\\n  configmap/api-keys created\\n`),
        context,
      );
      assert.match(stdout, reportRow(3, 0, 4), context);
      // Deny: refused; the four admitted before stay in the Report as `fail`.
      assert.match(
        stdout,
        new RegExp(
          `admission webhook "${audited}\\.policies\\.rollcall\\.dev" denied the request: ${message}`,
        ),
        context,
      );
      assert.match(stdout, reportRow(3, 4, 0), context);
      // Least privilege, with each account's own token: its job allowed, the rest refused.
      assert.match(stdout, /- patch its own pod's report annotation \(its job\): allowed/, context);
      assert.match(stdout, /- read Secret rollcall-webhook-ca .*: refused by RBAC/, context);
      assert.match(
        stdout,
        /- create a PolicyServer with serviceAccountName rollcall-worker: refused by ValidatingAdmissionPolicy \S+/,
        context,
      );
      assert.match(
        stdout,
        /queue UI: +http:\/\/127\.0\.0\.1:\d+\/queues\n.*user admin, password \S+/,
        context,
      );
      assert.match(stderr, /stopped everything the demo started/, context);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
