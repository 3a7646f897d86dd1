// The layout and size rules of .oxlintrc.json bite: oxlint, with the repo's config, fails
// probe files that cross a boundary or grow a function too long, and passes allowed ones.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));
const oxlint = fileURLToPath(new URL('../../node_modules/.bin/oxlint', import.meta.url));

interface Diagnostic {
  code: string;
  message: string;
  help?: string;
  filename: string;
}

/** A function of `lines` lines, every third one blank or a comment (they count too). */
function functionOfLines(lines: number): string {
  const body = Array.from({ length: lines - 3 }, (_, i) =>
    i % 3 === 0 ? '' : i % 3 === 1 ? '  // a comment' : `  x += ${i};`,
  );
  return ['export function long(x: number): number {', ...body, '  return x;', '}', ''].join('\n');
}

// Each probe is written at its path (relative to the repo), linted, and removed.
const probes = {
  dataPlaneToControlPlane: {
    path: 'data-plane/layout-probe-a.ts',
    text: "export { done } from '../control-plane/queue/outcome.ts';\n",
  },
  libToControlPlane: {
    path: 'lib/kube/layout-probe-b.ts',
    text: "export { done } from '../../control-plane/queue/outcome.ts';\n",
  },
  cliToTooling: {
    path: 'cli/layout-probe-c.ts',
    text: "export { Simulator } from '../tooling/sim/sim.ts';\n",
  },
  toolingToTest: {
    path: 'tooling/layout-probe-d.ts',
    text: "export { redisUrl } from '../test/support/redis.ts';\n",
  },
  dataPlaneToLibAndApi: {
    path: 'data-plane/layout-probe-e.ts',
    text: [
      "export { backoffDelay } from '../lib/backoff.ts';",
      "export { isPodReady } from '../api/kube.ts';",
      "export { compilePolicy } from './cel/compile.ts';",
      '',
    ].join('\n'),
  },
  functionOf121Lines: { path: 'control-plane/layout-probe-f.ts', text: functionOfLines(121) },
  functionOf120Lines: { path: 'control-plane/layout-probe-g.ts', text: functionOfLines(120) },
} as const;

let found: Diagnostic[] = [];

before(() => {
  try {
    for (const { path, text } of Object.values(probes)) writeFileSync(root + path, text);
    const paths = Object.values(probes).map((p) => p.path);
    const result = spawnSync(oxlint, ['-c', '.oxlintrc.json', '--format', 'json', ...paths], {
      cwd: root,
      encoding: 'utf8',
    });
    assert.ok(result.stdout, `oxlint printed nothing: ${result.stderr}`);
    found = (JSON.parse(result.stdout) as { diagnostics: Diagnostic[] }).diagnostics;
  } finally {
    for (const { path } of Object.values(probes)) rmSync(root + path, { force: true });
  }
});

function diagnosticsOf(probe: keyof typeof probes): string[] {
  return found
    .filter((d) => d.filename === probes[probe].path)
    .map((d) => `${d.code}: ${d.help ?? ''}`);
}

test('data-plane/ importing control-plane/ fails with the layout message', () => {
  assert.deepEqual(diagnosticsOf('dataPlaneToControlPlane'), [
    'eslint(no-restricted-imports): layout: data-plane/ imports only data-plane/, lib/, api/ and packages',
  ]);
});

test('lib/, two folders deep, importing control-plane/ fails with the layout message', () => {
  assert.deepEqual(diagnosticsOf('libToControlPlane'), [
    'eslint(no-restricted-imports): layout: lib/ imports only lib/, api/ and packages',
  ]);
});

test('cli/ importing tooling/ fails outside the two lazy loads', () => {
  const [message, ...more] = diagnosticsOf('cliToTooling');
  assert.match(message ?? '', /layout: cli\/ does not import tooling\//);
  assert.deepEqual(more, []);
});

test('production code importing test/ fails', () => {
  assert.deepEqual(diagnosticsOf('toolingToTest'), [
    'eslint(no-restricted-imports): layout: production code does not import test/ or bench/',
  ]);
});

test('data-plane/ importing lib/, api/ and itself passes', () => {
  assert.deepEqual(diagnosticsOf('dataPlaneToLibAndApi'), []);
});

test('a function of 121 lines, blank and comment lines counted, fails; one of 120 passes', () => {
  const [tooLong, ...more] = found.filter((d) => d.filename === probes.functionOf121Lines.path);
  assert.equal(tooLong?.code, 'eslint(max-lines-per-function)');
  assert.match(tooLong.message, /too many lines \(121\)/);
  assert.deepEqual(more, []);
  assert.deepEqual(diagnosticsOf('functionOf120Lines'), []);
});
