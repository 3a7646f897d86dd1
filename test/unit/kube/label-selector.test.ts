// metav1.LabelSelector as webhooks evaluate it (lib/kube/label-selector.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { selects } from '../../../lib/kube/label-selector.ts';

describe('label selectors match as metav1.LabelSelector says', () => {
  const labels = { env: 'prod', team: 'a' };
  const cases: [string, Parameters<typeof selects>[0], boolean][] = [
    ['no selector selects everything', undefined, true],
    ['an empty selector selects everything', {}, true],
    ['matchLabels that hold', { matchLabels: { env: 'prod' } }, true],
    ['matchLabels that do not', { matchLabels: { env: 'dev' } }, false],
    [
      'In with the value',
      { matchExpressions: [{ key: 'env', operator: 'In', values: ['prod', 'dev'] }] },
      true,
    ],
    [
      'In without the label',
      { matchExpressions: [{ key: 'tier', operator: 'In', values: ['x'] }] },
      false,
    ],
    [
      'NotIn without the label holds',
      { matchExpressions: [{ key: 'tier', operator: 'NotIn', values: ['x'] }] },
      true,
    ],
    [
      'NotIn with the value',
      { matchExpressions: [{ key: 'env', operator: 'NotIn', values: ['prod'] }] },
      false,
    ],
    ['Exists', { matchExpressions: [{ key: 'team', operator: 'Exists' }] }, true],
    ['DoesNotExist', { matchExpressions: [{ key: 'team', operator: 'DoesNotExist' }] }, false],
    [
      'matchLabels and expressions together',
      {
        matchLabels: { env: 'prod' },
        matchExpressions: [{ key: 'team', operator: 'In', values: ['b'] }],
      },
      false,
    ],
  ];
  for (const [name, selector, expected] of cases)
    test(name, () => assert.equal(selects(selector, labels), expected));
});
