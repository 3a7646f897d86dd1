/**
 * `rollcall test PATH…`: runs the declarative suites (`rollcall-test.yaml`, see suite.ts)
 * found under the paths, offline, on the policy server's load path and engine.
 *
 * Exit codes: 0 every result holds, 1 some result differs (both sides are shown), 2 a suite
 * cannot be read or one of its policies does not load (with the replica's message).
 */
import { readdir, stat } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { readOutputAndOperands } from '../command-line.ts';
import type { StatusIo } from '../status.ts';
import { InputError } from './documents.ts';
import { junitReport } from './junit.ts';
import {
  describeActual,
  describeExpected,
  type CaseOutcome,
  type SuiteOutcome,
} from './outcome.ts';
import { bareNamespace, buildRequest, DEFAULT_USER } from './request.ts';
import { evaluateRequest } from './run-policy.ts';
import { readSuite, SUITE_FILE, type Expectation, type Suite } from './suite.ts';

export const TEST_USAGE = `Usage: rollcall test PATH... [-o table|junit]

Runs the policy test suites named ${SUITE_FILE} (a directory is searched recursively; a file
is taken whatever its name), offline, with the policy server's own load path and engine.

A suite names its policies and resources (paths relative to it; multi-document YAML) and the
results it expects:

  policies: [policies.yaml]
  resources: [resources.yaml]        # Namespaces here give namespaceSelector its labels
  results:
    - policy: require-owner
      resource: ConfigMap/team-a/no-owner     # or Kind/name, or a list of them
      operation: CREATE                       # default; UPDATE takes oldResource
      result: fail                            # pass | fail | skip | error
      message: need an owner                  # optional substring

Optional: oldResources (files of objects before an UPDATE), kinds (resources of kinds rollcall
does not know: {group, kind, resource, scope}), and per result name and userInfo.
See docs/authoring.md.

Options:
  -o, --output table|junit   default table (junit: JUnit XML on standard output, for CI)

Exit codes: 0 every result holds, 1 some result differs, 2 a suite cannot be read or a policy
does not load.
`;

/** Every suite file under `paths`, sorted within each path; throws InputError. */
export async function findSuites(paths: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  for (const path of paths) {
    let info;
    try {
      info = await stat(path);
    } catch {
      throw new InputError(`${path}: no such file or directory`);
    }
    if (!info.isDirectory()) {
      found.push(path);
      continue;
    }
    const here: string[] = [];
    const walk = async (dir: string): Promise<void> => {
      for (const entry of await readdir(dir, { withFileTypes: true })) {
        if (entry.name.startsWith('.') || entry.name === 'node_modules') continue;
        const full = join(dir, entry.name);
        if (entry.isDirectory()) await walk(full);
        else if (entry.name === SUITE_FILE) here.push(full);
      }
    };
    await walk(path);
    if (here.length === 0) throw new InputError(`${path}: no ${SUITE_FILE} under it`);
    found.push(...here.sort());
  }
  return [...new Set(found)];
}

const messageMatches = (expected: string | undefined, actual: CaseOutcome['actual']) =>
  expected === undefined ||
  actual.message.includes(expected) ||
  actual.warnings.some((w) => w.includes(expected));

function runCase(suite: Suite, expectation: Expectation, index: number, ref: string): CaseOutcome {
  const policy = suite.policies.get(expectation.policy);
  const resource = suite.resources.get(ref);
  if (!policy || !resource) throw new Error('readSuite checked every reference'); // unreachable
  const old =
    expectation.oldResource === undefined
      ? undefined
      : (suite.oldResources.get(expectation.oldResource) ??
        suite.resources.get(expectation.oldResource));
  const built = buildRequest(
    {
      operation: expectation.operation,
      object: resource.object,
      oldObject: old?.object,
      user: expectation.userInfo ?? DEFAULT_USER,
      kinds: suite.kinds,
    },
    ref,
  );
  const namespace = built.attributes.namespace;
  const known = suite.namespaces.get(namespace);
  const notes =
    built.kind.from === 'guessed'
      ? [
          `${built.kind.kind} is not a kind rollcall knows: requested as resource ${built.kind.resource} (${built.kind.scope}); declare it under kinds`,
        ]
      : [];
  const evaluation = evaluateRequest(policy, {
    request: built.request,
    attributes: built.attributes,
    namespaceObject: namespace === '' ? null : (known ?? bareNamespace(namespace)),
    namespaceKnown: namespace === '' || known !== undefined,
    notes,
  });
  const actual = {
    result: evaluation.result,
    message: evaluation.message,
    warnings: evaluation.warnings,
  };
  const expected = {
    result: expectation.result,
    ...(expectation.message !== undefined ? { message: expectation.message } : {}),
  };
  return {
    index,
    ...(expectation.name !== undefined ? { name: expectation.name } : {}),
    policy: expectation.policy,
    resource: ref,
    operation: expectation.operation,
    expected,
    actual,
    ok: actual.result === expected.result && messageMatches(expected.message, actual),
    notes: evaluation.notes,
  };
}

/** Runs one suite file; a suite that cannot be read is an outcome with `error`. */
export async function runSuite(io: StatusIo, file: string): Promise<SuiteOutcome> {
  let suite: Suite;
  try {
    suite = await readSuite(io.readFile, file);
  } catch (error) {
    if (!(error instanceof InputError)) throw error;
    return { file, cases: [], error: error.message };
  }
  const cases: CaseOutcome[] = [];
  const named = suite.name !== file ? { name: suite.name } : {};
  try {
    suite.results.forEach((expectation, index) => {
      for (const ref of [expectation.resource].flat())
        cases.push(runCase(suite, expectation, index, ref));
    });
  } catch (error) {
    if (!(error instanceof InputError)) throw error;
    return { file, ...named, cases, error: error.message };
  }
  return { file, ...named, cases };
}

export async function runTest(argv: readonly string[], io: StatusIo): Promise<number> {
  const line = readOutputAndOperands(argv, io, 'test', TEST_USAGE, ['table', 'junit'], 'PATH');
  if ('exit' in line) return line.exit;
  const { output, operands: paths } = line.args;

  let files: string[];
  try {
    files = await findSuites(paths);
  } catch (error) {
    if (!(error instanceof InputError)) throw error;
    io.stderr(`rollcall test: ${error.message}\n`);
    return 2;
  }
  const outcomes: SuiteOutcome[] = [];
  for (const file of files) outcomes.push(await runSuite(io, file));

  if (output === 'junit') io.stdout(junitReport(outcomes));
  else io.stdout(table(outcomes));
  for (const o of outcomes) if (o.error) io.stderr(`rollcall test: ${o.error}\n`);

  if (outcomes.some((o) => o.error)) return 2;
  return outcomes.every((o) => o.cases.every((c) => c.ok)) ? 0 : 1;
}

const flat = (s: string) => s.replace(/\s+/g, ' ').trim();

function table(outcomes: readonly SuiteOutcome[]): string {
  const out: string[] = [];
  let total = 0;
  let failed = 0;
  for (const suite of outcomes) {
    const label = relative(process.cwd(), suite.file) || suite.file;
    out.push(suite.name ? `${label} (${suite.name})` : label);
    if (suite.error) {
      out.push(`  cannot run: ${suite.error}`, '');
      continue;
    }
    const rows = [
      ['', 'POLICY', 'RESOURCE', 'OPERATION', 'EXPECTED', 'ACTUAL', 'MESSAGE'],
      ...suite.cases.map((c) => [
        c.ok ? 'ok' : 'DIFFERS',
        c.policy,
        c.resource,
        c.operation,
        c.expected.result,
        c.actual.result,
        flat(c.actual.message || c.actual.warnings.join('; ')),
      ]),
    ];
    const widths = rows[0]!.map((_, col) => Math.max(...rows.map((r) => r[col]?.length ?? 0)));
    for (const row of rows)
      out.push(
        `  ${row
          .map((cell, col) => (col < row.length - 1 ? cell.padEnd(widths[col] ?? 0) : cell))
          .join('  ')
          .trimEnd()}`,
      );
    for (const c of suite.cases.filter((x) => !x.ok)) {
      out.push(
        '',
        `  DIFFERS: results[${c.index}]${c.name ? ` (${c.name})` : ''}: ${c.policy} on ${c.operation} ${c.resource}`,
        `    expected: ${describeExpected(c.expected)}`,
        `    actual:   ${describeActual(c.actual)}`,
        ...c.notes.map((n) => `    note:     ${n}`),
      );
    }
    total += suite.cases.length;
    failed += suite.cases.filter((c) => !c.ok).length;
    out.push('');
  }
  const broken = outcomes.filter((o) => o.error).length;
  out.push(
    `${total} results in ${outcomes.length - broken} suites: ${total - failed} hold, ${failed} differ${broken ? `; ${broken} suites cannot run` : ''}`,
  );
  return `${out.join('\n')}\n`;
}
