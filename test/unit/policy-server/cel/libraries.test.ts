// The Kubernetes CEL libraries rollcall adds to @marcbachmann/cel-js, each as named expressions
// that must hold (evaluated through evaluatePolicy, so the int64 conversion is in the path).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { holds, stringOf } from './helpers.ts';

const tables: Record<string, { name: string; expression: string; object?: unknown }[]> = {
  int64: [
    {
      name: 'a JSON integer is an int, so replicas + 1 works',
      expression: 'object.spec.replicas + 1 == 4',
      object: { spec: { replicas: 3 } },
    },
    {
      name: 'a JSON fraction stays a double',
      expression: 'object.spec.ratio * 2.0 == 1.5',
      object: { spec: { ratio: 0.75 } },
    },
    {
      name: 'integer division truncates as int64',
      expression: 'object.spec.replicas / 2 == 1',
      object: { spec: { replicas: 3 } },
    },
    {
      name: 'integers in lists are ints',
      expression: 'object.ports.all(p, p > 0 && p % 1 == 0)',
      object: { ports: [80, 443] },
    },
  ],
  quantity: [
    {
      name: 'binary and decimal suffixes compare exactly',
      expression: "quantity('1Gi').isGreaterThan(quantity('1G'))",
    },
    {
      name: 'milli-units',
      expression:
        "quantity('500m').isLessThan(quantity('1')) && quantity('500m') == quantity('0.5')",
    },
    {
      name: 'exponents',
      expression: "quantity('1e3') == quantity('1k') && quantity('1E-3') == quantity('1m')",
    },
    {
      name: 'compareTo gives -1, 0, 1',
      expression:
        "quantity('1').compareTo(quantity('2')) == -1 && quantity('2Ki').compareTo(quantity('2048')) == 0 && quantity('3').compareTo(quantity('2')) == 1",
    },
    {
      name: 'add and sub take quantities and ints',
      expression:
        "quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi') && quantity('5').sub(2) == quantity('3') && quantity('1').add(1) == quantity('2')",
    },
    {
      name: 'asInteger and isInteger (only with a scale >= 0, as the apiserver)',
      expression:
        "quantity('1Ki').asInteger() == 1024 && quantity('1Ki').isInteger() && !quantity('500m').isInteger() && !quantity('1000m').isInteger() && !quantity('1.0').isInteger()",
    },
    { name: 'asApproximateFloat', expression: "quantity('1500m').asApproximateFloat() == 1.5" },
    {
      name: 'asApproximateFloat rounds as the apiserver does (unscaled × 10^scale)',
      expression:
        "quantity('12e-1').asApproximateFloat() == 1.2000000000000002 && quantity('1E').asApproximateFloat() == 1e18",
    },
    {
      name: 'sign',
      expression:
        "quantity('-1').sign() == -1 && quantity('0').sign() == 0 && quantity('2m').sign() == 1",
    },
    {
      name: 'isQuantity tells valid from invalid',
      expression:
        "isQuantity('100Mi') && isQuantity('.5') && isQuantity('Ki') && !isQuantity('1 Gi') && !isQuantity('1e') && !isQuantity('1Qi') && !isQuantity('')",
    },
    {
      name: 'a container limit from the object',
      expression: "quantity(object.limits.memory).isLessThan(quantity('1Gi'))",
      object: { limits: { memory: '512Mi' } },
    },
  ],
  url: [
    {
      name: 'scheme, host, hostname and port',
      expression:
        "url('https://example.com:8443/a').getScheme() == 'https' && url('https://example.com:8443/a').getHost() == 'example.com:8443' && url('https://example.com:8443/a').getHostname() == 'example.com' && url('https://example.com:8443/a').getPort() == '8443'",
    },
    {
      name: 'a default port is kept as written',
      expression:
        "url('https://example.com:443').getPort() == '443' && url('https://example.com').getPort() == ''",
    },
    {
      name: 'IPv6 hosts',
      expression:
        "url('http://[::1]:80/').getHostname() == '::1' && url('http://[::1]:80/').getHost() == '[::1]:80'",
    },
    {
      name: 'escaped path',
      expression:
        "url('https://x/a%20b/c').getEscapedPath() == '/a%20b/c' && url('https://x').getEscapedPath() == ''",
    },
    {
      name: 'query values as lists',
      expression: "url('https://x/?a=1&a=2&b=%20').getQuery() == {'a': ['1', '2'], 'b': [' ']}",
    },
    {
      name: 'an absolute path is a URL',
      expression: "isURL('/a/b') && url('/a/b?c=d').getQuery()['c'] == ['d']",
    },
    {
      name: 'relative or malformed is not',
      expression: "!isURL('a/b') && !isURL('not a url') && !isURL('https://x:port/') && !isURL('')",
    },
  ],
  'url (Go edge cases)': [
    {
      name: 'a scheme with a rootless rest is an opaque URL, as in Go',
      expression: "isURL('mailto:a@b') && url('mailto:a@b').getHost() == '' && !isURL('a@b')",
    },
    {
      name: 'the host is unescaped (an IPv6 zone)',
      expression:
        "url('http://[fe80::1%25en0]:80/').getHostname() == 'fe80::1%en0' && url('http://[fe80::1%25en0]:80/').getPort() == '80'",
    },
  ],
  strings: [
    {
      name: 'replace all or n',
      expression:
        "'a-b-c'.replace('-', '_') == 'a_b_c' && 'a-b-c'.replace('-', '_', 1) == 'a_b-c' && 'abc'.replace('', '.') == '.a.b.c.'",
    },
    {
      name: 'charAt counts code points, size gives empty',
      expression: "'héllo'.charAt(1) == 'é' && 'ab'.charAt(2) == ''",
    },
    { name: 'reverse', expression: "'abc'.reverse() == 'cba' && ''.reverse() == ''" },
    {
      name: 'strings.quote escapes',
      expression: 'strings.quote(\'a"b\\n\') == \'"a\\\\"b\\\\n"\'',
    },
    {
      name: 'format %s %d %f',
      expression: "'%s=%d (%.2f) %f'.format(['x', 3, 1.5, 2.0]) == 'x=3 (1.50) 2.000000'",
    },
    {
      name: 'format %s of lists, bools and null',
      expression: "'%s %s %s'.format([[1, 'a'], true, null]) == '[1, \"a\"] true null'",
    },
    {
      name: 'format %x %o %b %e and %%',
      expression:
        "'%x %X %o %b %e 100%%'.format([255, 255, 8, 5, 1234.5]) == 'ff FF 10 101 1.234500×10⁰³ 100%'",
    },
  ],
  'format (nested values as cel-go prints them)': [
    {
      name: '%.Nf rounds an exact tie to even, as Go does',
      expression: "'%.0f %.0f %.1f'.format([2.5, 3.5, 0.25]) == '2 4 0.2'",
    },
    {
      name: 'strings in lists are quoted as Go does, doubles in lists as %f, maps sorted',
      expression:
        "'%s'.format([['a\"b', 1.5, 2, true, null]]) == '[\"a\\\\\"b\", 1.500000, 2, true, null]' && '%s'.format([{'b': 1, 'a': 'x'}]) == '{\"a\":\"x\", \"b\":1}'",
    },
  ],
  conversions: [
    {
      name: 'string(timestamp) is RFC 3339 with a trimmed fraction',
      expression:
        "string(timestamp('2025-06-01T12:30:00.500Z')) == '2025-06-01T12:30:00.5Z' && string(timestamp('2025-06-01T12:30:00Z')) == '2025-06-01T12:30:00Z'",
    },
    {
      name: 'string(duration) is in seconds',
      expression: "string(duration('1h2m3s')) == '3723s' && string(duration('1.5s')) == '1.5s'",
    },
    {
      name: 'int(timestamp) is Unix seconds',
      expression: "int(timestamp('1970-01-01T00:01:40Z')) == 100",
    },
    {
      name: 'format %s prints doubles as Go does',
      expression:
        "'%s %s %s %s'.format([1000000.0, 123456.0, 0.0001, 0.00001]) == '1e+06 123456 0.0001 1e-05'",
    },
  ],
  lists: [
    {
      name: 'sum of ints, doubles and an empty list',
      expression: '[1, 2, 3].sum() == 6 && [0.5, 0.25].sum() == 0.75 && [].sum() == 0',
    },
    {
      name: 'min and max',
      expression: "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'a'].min() == 'a'",
    },
    {
      name: 'isSorted',
      expression:
        "[1, 2, 2, 3].isSorted() && ![2, 1].isSorted() && ['a', 'b'].isSorted() && [].isSorted()",
    },
    {
      name: 'indexOf and lastIndexOf',
      expression:
        "[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(5) == -1 && ['a'].indexOf('a') == 0",
    },
    {
      name: 'indexOf compares maps by value, also a map kept as a Map',
      expression: 'object.items.indexOf(object.probe) == 1',
      object: {
        items: [{ a: 1 }, JSON.parse('{"constructor":"c"}')],
        probe: JSON.parse('{"constructor":"c"}'),
      },
    },
    {
      name: 'on object lists (dyn)',
      expression: 'object.ports.sum() == 523 && object.ports.max() == 443',
      object: { ports: [80, 443] },
    },
  ],
  regex: [
    {
      name: 'find returns the first match or empty',
      expression: "'abc123def456'.find('[0-9]+') == '123' && 'abc'.find('[0-9]') == ''",
    },
    {
      name: 'findAll returns every match, or at most n',
      expression:
        "'a1b22c333'.findAll('[0-9]+') == ['1', '22', '333'] && 'a1b22c333'.findAll('[0-9]+', 2) == ['1', '22'] && 'x'.findAll('y') == []",
    },
    { name: 'matches keeps working', expression: "'abc-123'.matches('^[a-z]+-[0-9]+$')" },
  ],
  'optional syntax and macros': [
    {
      name: '.? and orValue',
      expression: "object.?metadata.?labels['x'].orValue('none') == 'none'",
      object: { metadata: {} },
    },
    {
      name: 'has()',
      expression: 'has(object.metadata) && !has(object.spec)',
      object: { metadata: {} },
    },
    { name: 'cel.bind', expression: 'cel.bind(n, 3, n * n == 9)' },
    {
      name: 'all / exists / exists_one / filter / map',
      expression:
        '[1, 2, 3].all(x, x > 0) && [1, 2].exists(x, x == 2) && [1, 2].exists_one(x, x == 1) && [1, 2, 3].filter(x, x > 1) == [2, 3] && [1, 2].map(x, x * 2) == [2, 4]',
    },
  ],
};

describe('Kubernetes CEL libraries', () => {
  for (const [library, cases] of Object.entries(tables)) {
    describe(library, () => {
      for (const c of cases) {
        test(c.name, () => assert.equal(holds(c.expression, c.object ?? {}), true, c.expression));
      }
    });
  }

  test('an invalid quantity is a runtime error with the apiserver wording', () => {
    assert.throws(
      () => holds("quantity('1 Gi') == quantity('1')"),
      /quantities must match the regular expression/,
    );
  });

  test('asInteger of a fraction is a runtime error', () => {
    assert.throws(
      () => holds("quantity('1.5').asInteger() == 1"),
      /cannot convert value to integer/,
    );
  });

  test('an invalid URL is a runtime error', () => {
    assert.throws(() => holds("url('a b').getHost() == ''"), /URL parse error/);
  });

  test('min of an empty list is a runtime error', () => {
    assert.throws(() => holds('[].min() == 1'), /min called on empty list/);
  });

  test('a regex JS cannot honour, built at run time, is a runtime error', () => {
    assert.throws(() => holds("'x'.find(object.p) == ''", { p: '(?i)x' }), /inline flags/);
  });

  test('format gives the strings the conformance test compares', () => {
    assert.equal(stringOf("'%s has %d keys'.format(['cm', 2])"), 'cm has 2 keys');
  });
});
