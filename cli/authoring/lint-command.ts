/**
 * `rollcall lint FILE…`: every Policy in the files, loaded as a replica would load it (schema,
 * type check, unsupported libraries, cost estimate; a `source` document is downloaded), with
 * every problem at its field path and its place in the file, plus warnings (lint-checks.ts)
 * and notes (how the server will run it).
 *
 * Exit codes: 0 no errors (warnings allowed), 1 some error, 2 a file that cannot be read or
 * holds no Policy.
 */
import { policySpecSchema, type PolicySpec } from '../../api/v1alpha1.ts';
import {
  guardedResourcesInterceptedBy,
  interceptionMessage,
} from '../../control-plane/functions/webhook-core.ts';
import {
  compilePolicy,
  compileWithinBudget,
  costBound,
  type PolicyCode,
} from '../../data-plane/cel/index.ts';
import { MODULE_MESSAGE } from '../../data-plane/lifecycle.ts';
import { readOutputAndOperands } from '../command-line.ts';
import type { StatusIo } from '../status.ts';
import {
  InputError,
  parseFieldPath,
  readObjects,
  type SourceObject,
  type TextPosition,
} from './documents.ts';
import { lintPolicy, modeWarning } from './lint-checks.ts';
import { loadPolicy, policiesAmong, policyName } from './policies.ts';

export const LINT_USAGE = `Usage: rollcall lint FILE... [-o text|json]

Loads every Policy in the files as a policy-server replica would (schema, CEL type check,
unsupported libraries, cost estimate; a spec.source document is downloaded and checked) and
reports every problem with its field path and its place in the file, plus warnings: an
expression that is always true (or always false), a variable that is never used, the
deprecated spec.mode (with the validationActions to write instead).

Options:
  -o, --output text|json   default text

Exit codes: 0 no errors (warnings allowed), 1 some error, 2 a file cannot be read or holds no
Policy.
`;

export type Severity = 'error' | 'warning' | 'note';

export interface LintProblem {
  severity: Severity;
  file: string;
  line?: number;
  col?: number;
  policy: string;
  fieldPath: string;
  message: string;
}

/** `spec.x[0].expression: message at 2:5` → its parts (compile errors read so). */
function splitCompileError(error: string): {
  fieldPath: string;
  message: string;
  at?: TextPosition;
} {
  const colon = error.indexOf(': ');
  const fieldPath =
    colon > 0 && /^[\w.[\]]+$/.test(error.slice(0, colon)) ? error.slice(0, colon) : 'spec';
  const message = fieldPath === 'spec' && colon <= 0 ? error : error.slice(colon + 2);
  const at = / at (\d+):(\d+)$/.exec(message);
  return at
    ? { fieldPath, message, at: { line: Number(at[1]), col: Number(at[2]) } }
    : { fieldPath, message };
}

/** Every problem of one Policy object. */
export async function lintObject(source: SourceObject): Promise<LintProblem[]> {
  const name = policyName(source.value) ?? '(unnamed)';
  const problems: LintProblem[] = [];
  const add = (severity: Severity, fieldPath: string, message: string, at?: TextPosition) => {
    const located = source.locate(parseFieldPath(fieldPath), at);
    problems.push({
      severity,
      file: source.file,
      ...(located ? { line: located.line, col: located.col } : {}),
      policy: name,
      fieldPath,
      message,
    });
  };
  const addCompileError = (error: string) => {
    const { fieldPath, message, at } = splitCompileError(error);
    add('error', fieldPath, message, at);
  };
  if (name === '(unnamed)') add('error', 'metadata.name', 'Required value: a Policy needs a name');

  // The schema, as the replica reads a spec (each issue on its own).
  const parsed = policySpecSchema.safeParse(source.value.spec);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const path = ['spec', ...issue.path.map(String)]
        .join('.')
        .replace(/\.(\d+)(?=\.|$)/g, '[$1]');
      add('error', path, issue.message);
    }
    // The code may have problems of its own: say them now rather than after the next fix.
    const raw = source.value.spec as Record<string, unknown> | undefined;
    if (raw && Array.isArray(raw.validations)) {
      const code = {
        validations: raw.validations,
        variables: raw.variables,
        matchConditions: raw.matchConditions,
      };
      const compiled = compilePolicy(code as PolicyCode, 'spec');
      if (!compiled.ok)
        for (const error of compiled.errors) {
          // The schema said it already (an unknown reason is both).
          const { fieldPath } = splitCompileError(error);
          if (!problems.some((p) => p.fieldPath === fieldPath)) addCompileError(error);
        }
    }
    return sorted(problems);
  }
  const spec: PolicySpec = parsed.data;
  const deprecated = modeWarning(source.value.spec, spec);
  if (deprecated) add('warning', deprecated.fieldPath, deprecated.message);
  const interceptions = guardedResourcesInterceptedBy(spec.rules);
  if (interceptions.length > 0)
    add(
      'error',
      `spec.rules[${interceptions[0]?.rule ?? 0}]`,
      `rollcall would not register a webhook (Stalled, InterceptsClusterCriticalResources): ${interceptionMessage(spec.rules, interceptions)}`,
    );

  if (spec.validations) {
    const code = {
      validations: spec.validations,
      ...(spec.variables ? { variables: spec.variables } : {}),
      ...(spec.matchConditions ? { matchConditions: spec.matchConditions } : {}),
    };
    const compiled = compileWithinBudget(code, 'spec', spec.settings);
    if (!compiled.ok) {
      for (const error of compiled.errors) addCompileError(error);
      return sorted(problems);
    }
    for (const w of lintPolicy(compiled.policy)) add('warning', w.fieldPath, w.message);
    const bound = costBound(compiled.policy);
    if (!bound.bounded)
      add(
        'note',
        'spec',
        `evaluated on a worker thread with a deadline, not inline (docs/cel.md#cost): ${bound.reason}`,
      );
    return sorted(problems);
  }
  if (spec.source) {
    // Downloaded and compiled exactly as a replica does; its errors name the document's fields.
    const loaded = await loadPolicy(source);
    if (!loaded.ok) add('error', 'spec.source', loaded.message);
    return problems;
  }
  if (spec.module !== undefined) add('error', 'spec.module', MODULE_MESSAGE);
  return problems;
}

/** In the order of the file (problems without a place last, as found). */
const sorted = (problems: LintProblem[]): LintProblem[] =>
  problems
    .map((p, i) => ({ p, i }))
    .sort(
      (a, b) =>
        (a.p.line ?? Infinity) - (b.p.line ?? Infinity) ||
        (a.p.col ?? 0) - (b.p.col ?? 0) ||
        a.i - b.i,
    )
    .map(({ p }) => p);

export async function runLint(argv: readonly string[], io: StatusIo): Promise<number> {
  const line = readOutputAndOperands(argv, io, 'lint', LINT_USAGE, ['text', 'json'], 'FILE');
  if ('exit' in line) return line.exit;
  const { output, operands: files } = line.args;

  const problems: LintProblem[] = [];
  const unreadable: string[] = [];
  let policies = 0;
  for (const file of files) {
    let found: SourceObject[];
    try {
      found = policiesAmong(await readObjects((p) => io.readFile(p), file));
      if (found.length === 0)
        throw new InputError(`${file}: no rollcall.dev/v1alpha1 Policy in it`);
    } catch (error) {
      if (!(error instanceof InputError)) throw error;
      unreadable.push(error.message);
      continue;
    }
    policies += found.length;
    for (const source of found) problems.push(...(await lintObject(source)));
  }

  const count = (s: Severity) => problems.filter((p) => p.severity === s).length;
  if (output === 'json') io.stdout(`${JSON.stringify(problems, null, 2)}\n`);
  else {
    const lines = problems.map(
      (p) =>
        `${p.file}${p.line ? `:${p.line}:${p.col}` : ''}: ${p.severity}: ${p.policy}: ${p.fieldPath}: ${p.message}`,
    );
    const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
    lines.push(
      `${plural(policies, 'policy').replace('policys', 'policies')} checked: ${plural(count('error'), 'error')}, ${plural(count('warning'), 'warning')}`,
    );
    io.stdout(`${lines.join('\n')}\n`);
  }
  for (const message of unreadable) io.stderr(`rollcall lint: ${message}\n`);
  if (unreadable.length > 0) return 2;
  return count('error') > 0 ? 1 : 0;
}
