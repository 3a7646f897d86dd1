/**
 * `rollcall test -o junit`: the suites as JUnit XML, the format CI systems read (GitLab,
 * Jenkins, GitHub Actions reporters). One `<testsuite>` per suite file, one `<testcase>` per
 * resource of each expected result; a result that differs is a `<failure>`, a suite that cannot
 * run is one `<testcase>` with an `<error>`.
 */
import { describeActual, describeExpected, type SuiteOutcome } from './outcome.ts';

/** Text safe in XML content and attribute values (also drops characters XML 1.0 forbids). */
export function xmlEscape(text: string): string {
  return text
    .replace(/[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu, '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

const attrs = (values: Record<string, string | number>) =>
  Object.entries(values)
    .map(([k, v]) => ` ${k}="${xmlEscape(String(v))}"`)
    .join('');

export function junitReport(outcomes: readonly SuiteOutcome[]): string {
  const lines = ['<?xml version="1.0" encoding="UTF-8"?>'];
  const count = (o: SuiteOutcome) => ({
    tests: o.error ? 1 : o.cases.length,
    failures: o.cases.filter((c) => !c.ok).length,
    errors: o.error ? 1 : 0,
  });
  const totals = outcomes.map(count).reduce(
    (a, b) => ({
      tests: a.tests + b.tests,
      failures: a.failures + b.failures,
      errors: a.errors + b.errors,
    }),
    { tests: 0, failures: 0, errors: 0 },
  );
  lines.push(`<testsuites${attrs({ name: 'rollcall test', ...totals })}>`);
  for (const suite of outcomes) {
    lines.push(`  <testsuite${attrs({ name: suite.file, ...count(suite) })}>`);
    if (suite.error) {
      lines.push(
        `    <testcase${attrs({ classname: suite.file, name: 'read the suite and load its policies' })}>`,
        `      <error${attrs({ message: suite.error, type: 'SuiteError' })}>${xmlEscape(suite.error)}</error>`,
        '    </testcase>',
      );
    }
    for (const c of suite.cases) {
      const name = `${c.policy} ${c.operation} ${c.resource}: ${c.expected.result}${c.name ? ` (${c.name})` : ''}`;
      const open = `    <testcase${attrs({ classname: suite.file, name })}`;
      if (c.ok) {
        lines.push(`${open}/>`);
        continue;
      }
      const detail = [
        `results[${c.index}]`,
        `expected: ${describeExpected(c.expected)}`,
        `actual:   ${describeActual(c.actual)}`,
        ...c.notes.map((n) => `note:     ${n}`),
      ].join('\n');
      lines.push(
        `${open}>`,
        `      <failure${attrs({ message: `expected ${c.expected.result}, got ${c.actual.result}`, type: 'ResultDiffers' })}>${xmlEscape(detail)}</failure>`,
        '    </testcase>',
      );
    }
    lines.push('  </testsuite>');
  }
  lines.push('</testsuites>');
  return `${lines.join('\n')}\n`;
}
