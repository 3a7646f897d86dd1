// costBound: which policies may be evaluated on the main thread (docs/cel.md, "Cost").
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { costBound, type PolicyCode } from '../../../../data-plane/cel/index.ts';
import { compiled } from './helpers.ts';

const one = (expression: string): PolicyCode => ({ validations: [{ expression }] });

/** [name, policy, undefined when bounded or a pattern of the reason]. */
const cases: [string, PolicyCode, RegExp | undefined][] = [
  [
    'a field test',
    one("has(object.metadata.labels) && 'app' in object.metadata.labels"),
    undefined,
  ],
  [
    'one comprehension',
    one("object.spec.containers.all(c, !c.image.endsWith(':latest'))"),
    undefined,
  ],
  [
    'comprehensions side by side',
    one(
      "object.a.all(x, x > 0) && object.b.exists(y, y == 'z') && object.c.map(v, v + 1).size() > 0",
    ),
    undefined,
  ],
  [
    'a comprehension over another’s result (one after the other)',
    one("object.spec.containers.map(c, c.name).all(n, n != 'x')"),
    undefined,
  ],
  [
    'membership in a literal list inside a comprehension',
    one("object.spec.containers.all(c, c.imagePullPolicy in ['Always', 'IfNotPresent'])"),
    undefined,
  ],
  [
    'a comparison with a value outside the element',
    one('object.spec.containers.all(c, c.name != object.metadata.name)'),
    undefined,
  ],
  [
    'a literal linear regular expression',
    one("object.metadata.name.matches('^[a-z][a-z0-9-]*$')"),
    undefined,
  ],
  [
    'find and findAll with literals',
    one("object.x.find('[0-9]+') == '' && object.x.findAll('a', 2).size() < 3"),
    undefined,
  ],
  [
    'strings.quote and format',
    one("strings.quote(object.x) != '%s'.format([object.y])"),
    undefined,
  ],
  [
    'a cel.bind of data, iterated once',
    one('cel.bind(xs, object.items, xs.all(i, i > 1))'),
    undefined,
  ],
  [
    'a variable with a comprehension, read outside comprehensions',
    {
      variables: [{ name: 'names', expression: 'object.spec.containers.map(c, c.name)' }],
      validations: [{ expression: "!('x' in variables.names)" }],
    },
    undefined,
  ],
  [
    'nested comprehension',
    one('object.a.all(x, object.b.exists(y, x == y))'),
    /spec\.validations\[0\]\.expression: comprehension 'object\.b\.exists\(y, x == y\)' is nested/,
  ],
  [
    'nested in the receiver’s loop body of map',
    one('object.a.map(x, x.b.filter(y, y > 0)).size() > 0'),
    /is nested/,
  ],
  [
    'the expensive policy of the e2e test',
    one('!params.items.exists(a, params.items.exists(b, params.items.exists(c, a + b + c < 0)))'),
    /is nested in another comprehension/,
  ],
  [
    'nesting through a variable',
    {
      variables: [{ name: 'names', expression: 'object.spec.containers.map(c, c.name)' }],
      validations: [{ expression: 'object.spec.initContainers.all(c, variables.names == [])' }],
    },
    /'variables\.names' is computed by a comprehension and read inside another/,
  ],
  [
    'nesting through a variable that reads another variable',
    {
      variables: [
        { name: 'names', expression: 'object.spec.containers.map(c, c.name)' },
        { name: 'first', expression: 'variables.names[0]' },
      ],
      validations: [{ expression: "object.b.all(x, variables.first != '')" }],
    },
    /'variables\.first' is computed by a comprehension/,
  ],
  [
    'nesting through cel.bind',
    one('cel.bind(ns, object.a.map(x, x.n), object.b.all(y, ns == []))'),
    /'ns' is computed by a comprehension/,
  ],
  [
    'a regular expression from data',
    one('object.x.matches(object.pattern)'),
    /takes its regular expression from data/,
  ],
  [
    'a regular expression with a backreference',
    one("object.x.matches('(a)\\\\1')"),
    /refused by V8's linear-time engine/,
  ],
  [
    'a regular expression with a lookahead',
    one("object.x.find('a(?=b)') == ''"),
    /refused by V8's linear-time engine/,
  ],
  [
    'an anchored, short regular expression with a count above 16 (the bench’s name rule)',
    one("object.metadata.name.matches('^[a-z][a-z0-9-]{0,62}$')"),
    undefined,
  ],
  [
    'the DNS label regular expression',
    one("object.metadata.name.matches('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')"),
    undefined,
  ],
  [
    'a count above 16 in a regular expression that is not anchored',
    one("object.x.matches('[a-z]{0,62}$')"),
    /refused by V8's linear-time engine/,
  ],
  [
    'counts above 16 with too many ways to backtrack',
    one("object.x.matches('^a{0,62}a{0,62}a{0,62}$')"),
    /refused by V8's linear-time engine/,
  ],
  [
    'the catastrophic regular expression of the e2e test',
    one("!object.data.value.matches('^(a+)+$')"),
    /repeats a group that holds a quantifier or an alternation/,
  ],
  ['a repeated alternation', one("object.x.matches('^(a|aa)*$')"), /repeats a group/],
  [
    'membership in data inside a comprehension',
    one('object.spec.containers.all(c, c.image in params.allowed)'),
    /'c\.image in params\.allowed' inside a comprehension reads a value not taken from its element/,
  ],
  [
    'a list function on data inside a comprehension',
    one('object.a.all(x, object.b.indexOf(x) >= 0)'),
    /'object\.b\.indexOf\(x\)' inside a comprehension/,
  ],
  [
    'concatenation with data inside a comprehension',
    one('object.a.map(x, object.s + x).size() > 0'),
    /'object\.s \+ x' inside a comprehension/,
  ],
  [
    'a map to a value not taken from the element',
    one("object.a.map(x, object.s).join(',') != ''"),
    /'object\.a\.map\(x, object\.s\)' maps each element to a value not taken from it/,
  ],
  [
    'a replacement from data',
    one("object.s.replace('a', object.t) != ''"),
    /replaces with a value from data/,
  ],
  [
    'a separator from data',
    one("object.l.join(object.sep) != ''"),
    /joins with a separator from data/,
  ],
  [
    'a messageExpression counts too',
    {
      validations: [
        {
          expression: 'true',
          messageExpression: "object.a.exists(x, object.b.exists(y, y == x)) ? 'both' : 'neither'",
        },
      ],
    },
    /spec\.validations\[0\]\.messageExpression: .*is nested/,
  ],
  [
    'a match condition counts too',
    {
      matchConditions: [{ name: 'm', expression: 'object.a.all(x, object.b.all(y, x != y))' }],
      validations: [{ expression: 'true' }],
    },
    /spec\.matchConditions\[0\]\.expression: .*is nested/,
  ],
];

describe('the cost bound of a policy', () => {
  for (const [name, code, reason] of cases) {
    test(`${name}: ${reason ? 'not bounded' : 'bounded'}`, () => {
      const bound = costBound(compiled(code));
      if (!reason) return assert.deepEqual(bound, { bounded: true });
      assert.equal(bound.bounded, false);
      assert.match(bound.bounded ? '' : bound.reason, reason);
    });
  }
});
