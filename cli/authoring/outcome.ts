/** What running a suite came to, shared by the table and the JUnit report. */
import type { Result } from './run-policy.ts';

/** What one expected result came to. */
export interface CaseOutcome {
  /** `results[i]` in the suite, and the resource when the entry lists several. */
  index: number;
  name?: string;
  policy: string;
  resource: string;
  operation: string;
  expected: { result: Result; message?: string };
  actual: { result: Result; message: string; warnings: string[] };
  ok: boolean;
  /** What could not be checked offline (e.g. a namespace whose labels are unknown). */
  notes: string[];
}

export interface SuiteOutcome {
  file: string;
  /** The suite's `name`, when it has one. */
  name?: string;
  cases: CaseOutcome[];
  /** Why the suite could not run (exit 2). */
  error?: string;
}

/** `fail, message containing "x"`. */
export const describeExpected = (e: CaseOutcome['expected']) =>
  e.message === undefined
    ? e.result
    : `${e.result}, message containing ${JSON.stringify(e.message)}`;

export const describeActual = (a: CaseOutcome['actual']) =>
  `${a.result}${a.message ? `: ${a.message}` : ''}${a.warnings.length ? ` (warnings: ${a.warnings.join('; ')})` : ''}`;
