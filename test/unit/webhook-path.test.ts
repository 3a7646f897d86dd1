// The webhook path contract (api/webhook-path.ts): what the control plane writes into a webhook
// configuration, the policy server and the simulator read back unchanged, and nothing else.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { parseWebhookPath, webhookPath } from '../../api/webhook-path.ts';

/** A DNS-1123 label, the part of an object name between dots. */
const label = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/);
/** A Kubernetes object name: dot-separated labels, at most 253 characters. */
const objectName = fc
  .array(label, { minLength: 1, maxLength: 4 })
  .map((labels) => labels.join('.'))
  .filter((name) => name.length <= 253);
const generation = fc.oneof(
  fc.integer({ min: 1, max: 1000 }),
  fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
);

/** An object name by another reading than the parser's: per label, then the whole. */
function isObjectName(name: string): boolean {
  const labelOk = (l: string) =>
    l.length > 0 && /^[-a-z0-9]+$/.test(l) && !l.startsWith('-') && !l.endsWith('-');
  return name.length <= 253 && name.split('.').every(labelOk);
}

describe('the webhook path', () => {
  test('parses back what it builds, for every object name and generation', () => {
    fc.assert(
      fc.property(objectName, generation, (policy, gen) => {
        assert.deepEqual(parseWebhookPath(webhookPath(policy, gen)), { policy, generation: gen });
      }),
    );
  });

  test('a name of the full 253 characters, and the largest exact generation', () => {
    const policy = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`;
    assert.equal(policy.length, 253);
    const path = webhookPath(policy, Number.MAX_SAFE_INTEGER);
    assert.deepEqual(parseWebhookPath(path), { policy, generation: Number.MAX_SAFE_INTEGER });
  });

  const refused: [string, string][] = [
    ['no generation', '/validate/require-labels'],
    ['generation 0', '/validate/p/0'],
    ['a leading zero', '/validate/p/01'],
    ['a sign', '/validate/p/+1'],
    ['a negative generation', '/validate/p/-1'],
    ['an exponent', '/validate/p/1e3'],
    ['a fraction', '/validate/p/1.0'],
    ['17 digits', '/validate/p/12345678901234567'],
    ['18 digits', '/validate/p/123456789012345678'],
    ['16 digits past 2^53 - 1', '/validate/p/9007199254740992'],
    ['an upper-case name', '/validate/P/1'],
    ['a name starting with a dash', '/validate/-p/1'],
    ['a name ending with a dot', '/validate/p./1'],
    ['an empty label', '/validate/a..b/1'],
    ['a label ending with a dash', '/validate/a-.b/1'],
    ['a name of 254 characters', `/validate/${'a'.repeat(254)}/1`],
    ['an empty name', '/validate//1'],
    ['a parent directory as name', '/validate/../1'],
    ['a parent directory after', '/validate/p/1/..'],
    ['a parent directory before', '/validate/../p/1'],
    ['an encoded parent directory', '/validate/%2e%2e/1'],
    ['an extra segment', '/validate/p/1/2'],
    ['a trailing slash', '/validate/p/1/'],
    ['a doubled slash', '//validate/p/1'],
    ['another prefix', '/mutate/p/1'],
    ['a prefix segment', '/x/validate/p/1'],
    ['no leading slash', 'validate/p/1'],
    ['a query', '/validate/p/1?x=1'],
    ['a space', '/validate/p/1 '],
    ['nothing', ''],
  ];
  for (const [what, path] of refused)
    test(`refuses ${what}`, () => assert.equal(parseWebhookPath(path), undefined));

  test('accepts only what the builder makes from a valid name and generation', () => {
    // Random edits of valid paths: whatever parses must be a path the builder writes.
    const edit = fc.record({
      at: fc.nat(),
      drop: fc.nat({ max: 3 }),
      insert: fc.stringMatching(/^[-/.0-9aA%?#+ ]{0,4}$/),
    });
    fc.assert(
      fc.property(objectName, generation, edit, (policy, gen, { at, drop, insert }) => {
        const valid = webhookPath(policy, gen);
        const i = at % (valid.length + 1);
        const path = valid.slice(0, i) + insert + valid.slice(i + drop);
        const parsed = parseWebhookPath(path);
        if (parsed === undefined) return;
        assert.equal(webhookPath(parsed.policy, parsed.generation), path);
        assert.ok(isObjectName(parsed.policy), parsed.policy);
        assert.ok(Number.isSafeInteger(parsed.generation) && parsed.generation >= 1);
      }),
      { numRuns: 2000 },
    );
  });
});
