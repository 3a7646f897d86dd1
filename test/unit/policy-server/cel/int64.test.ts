import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { toCelValue } from '../../../../data-plane/cel/index.ts';

const cases: { name: string; json: string; want: unknown }[] = [
  { name: 'an integer becomes a BigInt', json: '3', want: 3n },
  { name: 'a negative integer becomes a BigInt', json: '-7', want: -7n },
  { name: 'a fraction stays a double', json: '1.5', want: 1.5 },
  { name: 'an integer beyond int64 stays a double', json: '1e19', want: 1e19 },
  {
    name: 'strings, booleans and null are unchanged',
    json: '["1", true, null]',
    want: ['1', true, null],
  },
  {
    name: 'nested objects and lists are converted',
    json: '{"spec":{"replicas":2,"ports":[80,{"n":1}],"ratio":0.5}}',
    want: { spec: { replicas: 2n, ports: [80n, { n: 1n }], ratio: 0.5 } },
  },
];

describe('toCelValue (JSON integers as int64)', () => {
  for (const c of cases) {
    test(c.name, () => assert.deepEqual(toCelValue(JSON.parse(c.json)), c.want));
  }

  test('an object with a "__proto__" or "constructor" key becomes a Map (data, not a prototype or a type)', () => {
    const out = toCelValue(JSON.parse('{"__proto__":{"x":1},"constructor":"c"}'));
    assert.ok(out instanceof Map);
    assert.deepEqual(
      [...out.entries()],
      [
        ['__proto__', { x: 1n }],
        ['constructor', 'c'],
      ],
    );
    assert.equal(Object.getPrototypeOf({}), Object.prototype);
  });
});
