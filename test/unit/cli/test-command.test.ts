import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { cli, inProcess, policyYaml, repoRoot, scratch } from './helpers.ts';

const example = (name: string) => readFileSync(join(repoRoot, 'examples/authoring', name), 'utf8');

/** A suite directory: the example's policies and resources, with `suite` as rollcall-test.yaml. */
function suiteDir(suite: string, extra: Record<string, string> = {}): string {
  return scratch({
    'policies.yaml': example('policies.yaml'),
    'resources.yaml': example('resources.yaml'),
    'rollcall-test.yaml': suite,
    ...extra,
  });
}

interface XmlElement {
  name: string;
  attributes: Record<string, string>;
  children: XmlElement[];
  text: string;
}

/** Parses XML strictly enough to prove it well-formed (throws otherwise). */
function parseXml(xml: string): XmlElement {
  const entity = /&(amp|lt|gt|quot|apos);/g;
  const plain = (s: string, where: string) => {
    if (/[<>]/.test(s) || /&/.test(s.replace(entity, '')))
      throw new Error(`unescaped text in ${where}: ${s}`);
    return s.replace(
      entity,
      (_, e: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" })[e] ?? '',
    );
  };
  const body = xml.replace(/^<\?xml version="1\.0" encoding="UTF-8"\?>\n/, '');
  const root: XmlElement = { name: '#document', attributes: {}, children: [], text: '' };
  const stack = [root];
  const token = /<(\/?)([A-Za-z][\w-]*)((?:\s+[\w-]+="[^"]*")*)\s*(\/?)>|([^<]+)/gy;
  let match: RegExpExecArray | null;
  let consumed = 0;
  while ((match = token.exec(body)) !== null) {
    consumed = token.lastIndex;
    const [, closing, name, attrs, selfClosing, text] = match;
    const top = stack.at(-1) as XmlElement;
    if (text !== undefined) {
      top.text += plain(text, top.name);
      continue;
    }
    if (closing) {
      if (top.name !== name) throw new Error(`</${name}> closes <${top.name}>`);
      stack.pop();
      continue;
    }
    const attributes: Record<string, string> = {};
    for (const [, key, value] of (attrs ?? '').matchAll(/([\w-]+)="([^"]*)"/g))
      attributes[key as string] = plain(value as string, `${name}@${key}`);
    const element: XmlElement = { name: name as string, attributes, children: [], text: '' };
    top.children.push(element);
    if (!selfClosing) stack.push(element);
  }
  if (consumed !== body.length)
    throw new Error(`not XML at ${consumed}: ${body.slice(consumed, consumed + 40)}`);
  if (stack.length !== 1) throw new Error(`<${stack.at(-1)?.name}> is not closed`);
  if (root.children.length !== 1 || root.text.trim() !== '')
    throw new Error('not one root element');
  return root.children[0] as XmlElement;
}

const all = (e: XmlElement, name: string): XmlElement[] =>
  e.children.flatMap((c) => [...(c.name === name ? [c] : []), ...all(c, name)]);

const wrongSuite = `policies: [policies.yaml]
resources: [resources.yaml]
results:
  - policy: require-owner
    resource: ConfigMap/team-a/no-owner
    result: fail
    message: need an owner
  - policy: require-owner
    resource: ConfigMap/team-a/has-owner
    result: fail
`;

describe('rollcall test', () => {
  test('the example suite holds: exit 0 and a table of every result', async () => {
    const ran = await cli(['test', 'examples/authoring']);
    assert.equal(ran.code, 0, ran.stdout + ran.stderr);
    assert.match(ran.stdout, /^examples\/authoring\/rollcall-test\.yaml$/m);
    assert.match(
      ran.stdout,
      /^ {2}ok +require-owner +ConfigMap\/team-a\/no-owner +CREATE +fail +fail +need an owner label$/m,
    );
    assert.match(ran.stdout, /^12 results in 1 suites: 12 hold, 0 differ$/m);
  });

  test('one wrong expectation exits 1 and shows the expected and the actual result', async () => {
    const dir = suiteDir(wrongSuite);
    const ran = await cli(['test', dir]);
    assert.equal(ran.code, 1, ran.stderr);
    assert.match(
      ran.stdout,
      /^ {2}DIFFERS +require-owner +ConfigMap\/team-a\/has-owner +CREATE +fail +pass$/m,
    );
    assert.match(
      ran.stdout,
      /DIFFERS: results\[1\]: require-owner on CREATE ConfigMap\/team-a\/has-owner\n {4}expected: fail\n {4}actual: {3}pass\n/,
    );
    assert.match(ran.stdout, /2 results in 1 suites: 1 hold, 1 differ/);
  });

  test('a message that is not in the denial differs too, showing both', async () => {
    const dir = suiteDir(wrongSuite.replace('message: need an owner', 'message: need a team'));
    const ran = await inProcess(['test', dir]);
    assert.equal(ran.code, 1);
    assert.match(
      ran.stdout,
      /expected: fail, message containing "need a team"\n {4}actual: {3}fail: need an owner label/,
    );
  });

  test('-o junit is well-formed JUnit XML with a failure per differing result', async () => {
    const dir = suiteDir(wrongSuite);
    const ran = await cli(['test', dir, 'examples/authoring', '-o', 'junit']);
    assert.equal(ran.code, 1);
    const root = parseXml(ran.stdout);
    assert.equal(root.name, 'testsuites');
    assert.deepEqual(
      {
        tests: root.attributes.tests,
        failures: root.attributes.failures,
        errors: root.attributes.errors,
      },
      { tests: '14', failures: '1', errors: '0' },
    );
    assert.deepEqual(
      root.children.map((s) => [s.name, s.attributes.tests, s.attributes.failures]),
      [
        ['testsuite', '2', '1'],
        ['testsuite', '12', '0'],
      ],
    );
    const [failure] = all(root, 'failure');
    assert.equal(failure?.attributes.message, 'expected fail, got pass');
    assert.match(failure?.text ?? '', /expected: fail\nactual: {3}pass/);
    // Names with quotes and apostrophes are escaped.
    assert.ok(
      all(root, 'testcase').some((t) =>
        t.attributes.name?.includes("rollcall's webhooks never see kube-system"),
      ),
    );
  });

  test('a directory is searched recursively for suites; other files are not suites', async () => {
    const suite = `policies: [../policies.yaml]\nresources: [../resources.yaml]\nresults: [{ policy: require-owner, resource: ConfigMap/team-a/has-owner, result: pass }]\n`;
    const dir = scratch({
      'policies.yaml': example('policies.yaml'),
      'resources.yaml': example('resources.yaml'),
      'a/rollcall-test.yaml': suite,
      'b/c/rollcall-test.yaml': suite.replaceAll('../', '../../'),
      'b/notes.yaml': 'not: a suite\n',
      '.hidden/rollcall-test.yaml': 'broken: [\n',
    });
    const ran = await inProcess(['test', dir]);
    assert.equal(ran.code, 0, ran.stdout + ran.stderr);
    assert.match(ran.stdout, /2 results in 2 suites: 2 hold, 0 differ/);
  });

  test('a kind rollcall does not know is guessed and said so, or taken from the suite’s kinds', async () => {
    const files = {
      'policies.yaml': `apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: widgets }
spec:
  policyServer: default
  rules: [{ operations: [CREATE], apiGroups: [example.com], apiVersions: [v1], resources: [gizmos] }]
  validations: [{ expression: "object.spec.size <= 3", message: too big }]
`,
      'resources.yaml':
        'apiVersion: example.com/v1\nkind: Widget\nmetadata: { name: w, namespace: n }\nspec: { size: 5 }\n',
    };
    const expectation =
      'results: [{ policy: widgets, resource: Widget/n/w, result: fail, message: too big }]\n';
    const guessed = scratch({
      ...files,
      'rollcall-test.yaml': `policies: [policies.yaml]\nresources: [resources.yaml]\n${expectation}`,
    });
    const differs = await inProcess(['test', guessed]);
    assert.equal(differs.code, 1);
    assert.match(differs.stdout, /actual: {3}skip: no rule matches CREATE widgets/);
    assert.match(
      differs.stdout,
      /note: {5}Widget is not a kind rollcall knows: requested as resource widgets \(Namespaced\); declare it under kinds/,
    );
    const declared = scratch({
      ...files,
      'rollcall-test.yaml': `policies: [policies.yaml]\nresources: [resources.yaml]\nkinds: [{ group: example.com, kind: Widget, resource: gizmos }]\n${expectation}`,
    });
    const holds = await inProcess(['test', declared]);
    assert.equal(holds.code, 0, holds.stdout);
  });

  test('an expression that fails at run time is the result error, not fail', async () => {
    const dir = scratch({
      'policies.yaml': policyYaml(
        'strict',
        'validations: [{ expression: "object.data.key == \'x\'" }]',
      ),
      'resources.yaml':
        'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: empty, namespace: n }\n',
      'rollcall-test.yaml': `policies: [policies.yaml]
resources: [resources.yaml]
results:
  - { policy: strict, resource: ConfigMap/n/empty, result: error, message: "no such key" }
  - { policy: strict, resource: ConfigMap/n/empty, result: fail }
`,
    });
    const ran = await inProcess(['test', dir]);
    assert.equal(ran.code, 1);
    assert.match(
      ran.stdout,
      /^ {2}ok +strict +ConfigMap\/n\/empty +CREATE +error +error +policy strict generation 1 failed: /m,
    );
    assert.match(
      ran.stdout,
      /expected: fail\n {4}actual: {3}error: policy strict generation 1 failed/,
    );
  });
});

describe('rollcall test: suites that cannot run exit 2', () => {
  const cases: [string, Record<string, string>, RegExp][] = [
    [
      'a suite that is not YAML',
      { 'rollcall-test.yaml': 'results: [\n' },
      /rollcall-test\.yaml:2:1: Flow sequence/,
    ],
    [
      'a field the format does not have',
      {
        'rollcall-test.yaml': wrongSuite.replace('message: need an owner', 'mesage: need an owner'),
      },
      /results\.0: Unrecognized key: "mesage"/,
    ],
    [
      'a result that is not pass, fail, skip or error',
      { 'rollcall-test.yaml': wrongSuite.replace('result: fail\n', 'result: denied\n') },
      /results\.0\.result: Invalid option/,
    ],
    [
      'a resources file that is missing',
      { 'rollcall-test.yaml': wrongSuite.replace('resources.yaml', 'gone.yaml') },
      /gone\.yaml: no such file/,
    ],
    [
      'a resource the files do not hold',
      { 'rollcall-test.yaml': wrongSuite.replace('team-a/has-owner', 'team-a/nobody') },
      /results\[1\]\.resource: ConfigMap\/team-a\/nobody is not in resources\.yaml/,
    ],
    [
      'a policy the files do not hold',
      { 'rollcall-test.yaml': wrongSuite.replace('policy: require-owner', 'policy: require-ownr') },
      /results\[0\]\.policy: no policy require-ownr in policies\.yaml \(it has require-owner, limit-replicas\)/,
    ],
  ];
  for (const [name, files, message] of cases)
    test(name, async () => {
      const dir = suiteDir(wrongSuite, files);
      const ran = await inProcess(['test', dir]);
      assert.equal(ran.code, 2, ran.stdout);
      assert.match(ran.stderr, message);
      assert.match(ran.stdout, /cannot run: /);
    });

  test('an unreadable suite exits 2 from the command line too, and junit reports it as an error', async () => {
    const dir = scratch({ 'rollcall-test.yaml': 'policies: [\n' });
    const ran = await cli(['test', dir]);
    assert.equal(ran.code, 2);
    assert.match(ran.stderr, /^rollcall test: .*rollcall-test\.yaml:2:1: /m);
    const junit = await inProcess(['test', dir, '-o', 'junit']);
    assert.equal(junit.code, 2);
    assert.equal(all(parseXml(junit.stdout), 'error').length, 1);
  });

  test('a policy that does not load exits 2 with the message its replica would report', async () => {
    const dir = suiteDir(wrongSuite, {
      'policies.yaml': example('policies.yaml').replace('params.label in', 'param.label in'),
    });
    const ran = await cli(['test', dir]);
    assert.equal(ran.code, 2);
    assert.match(
      ran.stderr,
      /policy require-owner \(.*policies\.yaml\) generation 1 failed to load: spec\.validations\[0\]\.expression: undeclared reference to 'param' at 1:32\n/,
    );
  });

  test('a path without suites, or that does not exist, exits 2', async () => {
    const empty = scratch({ 'x.yaml': 'a: 1\n' });
    const none = await inProcess(['test', empty]);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /no rollcall-test\.yaml under it/);
    const missing = await inProcess(['test', join(empty, 'nope')]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /no such file or directory/);
  });
});
