// The policy library (policies/): its suites pass under `rollcall test`, its policies lint
// clean, and every policy has a suite that shows it failing and passing. The suites' results
// are rollcall's verdicts; test/integration/policy-server/pod-security-differential.test.ts
// and library-vap.test.ts hold them against the apiserver.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { repoRoot } from '../../../tooling/cluster/paths.ts';

const policiesDir = join(repoRoot, 'policies');
const libraryFiles = readdirSync(policiesDir).filter((f) => f.endsWith('.yaml'));

const rollcall = (...args: string[]) =>
  spawnSync(process.execPath, [join(repoRoot, 'cli', 'rollcall.ts'), ...args], {
    cwd: repoRoot,
    encoding: 'utf8',
  });

test('`rollcall test policies/` passes every suite of the library', () => {
  const out = rollcall('test', 'policies/');
  assert.equal(out.status, 0, `${out.stdout}\n${out.stderr}`);
  assert.match(out.stdout, /(\d+) results in 3 suites: \1 hold, 0 differ/);
});

test('every library policy loads as a replica would and lints clean', () => {
  const out = rollcall('lint', ...libraryFiles.map((f) => join('policies', f)));
  assert.equal(out.status, 0, `${out.stdout}\n${out.stderr}`);
  assert.match(`${out.stdout}${out.stderr}`, /0 errors, 0 warnings/);
});

test('every library policy has a suite result where it fails and one where it passes', () => {
  const names = libraryFiles.flatMap((file) =>
    parseAllDocuments(readFileSync(join(policiesDir, file), 'utf8'))
      .map((d) => d.toJS() as { kind?: string; metadata?: { name?: string } } | null)
      .filter((p) => p?.kind === 'Policy')
      .map((p) => p!.metadata!.name!),
  );
  assert.ok(names.length >= 24, `${names.length} policies`);
  const results = readdirSync(join(policiesDir, 'tests')).flatMap(
    (dir) =>
      (
        parse(readFileSync(join(policiesDir, 'tests', dir, 'rollcall-test.yaml'), 'utf8')) as {
          results: { policy: string; result: string }[];
        }
      ).results,
  );
  const missing = names.flatMap((name) =>
    ['fail', 'pass']
      .filter((r) => !results.some((x) => x.policy === name && x.result === r))
      .map((r) => `${name}: no ${r}`),
  );
  assert.deepEqual(missing, []);
});
