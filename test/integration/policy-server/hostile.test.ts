// Hostile policies, generated: a real `rollcall policy-server` process on the local cluster,
// a well-behaved canary Policy beside it, and fast-check generating Policies whose values grow
// (doubling chains of variables, comprehensions nested over each other, cel.bind chains,
// replace/join/split/format, list and map literals) in variables, matchConditions,
// validations and messageExpressions. For each: the process stays up, /readyz stays 200, every
// hostile request is answered by the server within its timeoutSeconds (by its verdict or its
// failurePolicy), and the canary answers correctly within 1 s, during and after.
//
// The seed is printed first; ROLLCALL_HOSTILE_SEED=<seed> replays a run, with
// ROLLCALL_HOSTILE_PATH=<path> (printed on failure) its failing case alone.
// ROLLCALL_HOSTILE_RUNS sets the number of cases (default 25).
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { CustomObjectsApi } from '@kubernetes/client-node';
import fc from 'fast-check';
import { httpsRequest, type HttpsAnswer } from '../../support/https.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { policyManifest } from '../../support/manifests.ts';
import { configMapReview, TestPolicyServer } from '../../support/policy-server-process.ts';
import { until } from '../../support/scenario.ts';

// ---------------------------------------------------------------- the CEL the generator writes

/** A CEL expression tree, printed as CEL text by `print`. */
type Node =
  | { op: 'input'; path: string }
  | { op: 'id'; name: string }
  | { op: 'string'; value: string }
  | { op: 'bytes'; value: string }
  | { op: 'int'; value: number }
  | { op: 'list'; items: Node[] }
  | { op: 'map'; entries: [Node, Node][] }
  | { op: 'index'; target: Node; key: Node }
  | { op: 'binary'; operator: '+' | '==' | '!=' | '<' | '>' | '>=' | 'in'; left: Node; right: Node }
  | { op: 'cond'; test: Node; then: Node; otherwise: Node }
  | { op: 'call'; fn: string; args: Node[] }
  | { op: 'method'; target: Node; fn: string; args: Node[] }
  | {
      op: 'macro';
      target: Node;
      macro: 'map' | 'filter' | 'all' | 'exists';
      iter: string;
      body: Node;
    }
  | { op: 'bind'; name: string; value: Node; body: Node };

const quoted = (text: string) => `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

function print(node: Node): string {
  switch (node.op) {
    case 'input':
      return node.path;
    case 'id':
      return node.name;
    case 'string':
      return quoted(node.value);
    case 'bytes':
      return `b${quoted(node.value)}`;
    case 'int':
      return String(node.value);
    case 'list':
      return `[${node.items.map(print).join(', ')}]`;
    case 'map':
      return `{${node.entries.map(([k, v]) => `${print(k)}: ${print(v)}`).join(', ')}}`;
    case 'index':
      return `${print(node.target)}[${print(node.key)}]`;
    case 'binary':
      return `(${print(node.left)} ${node.operator} ${print(node.right)})`;
    case 'cond':
      return `(${print(node.test)} ? ${print(node.then)} : ${print(node.otherwise)})`;
    case 'call':
      return `${node.fn}(${node.args.map(print).join(', ')})`;
    case 'method':
      return `${print(node.target)}.${node.fn}(${node.args.map(print).join(', ')})`;
    case 'macro':
      return `${print(node.target)}.${node.macro}(${node.iter}, ${print(node.body)})`;
    case 'bind':
      return `cel.bind(${node.name}, ${print(node.value)}, ${print(node.body)})`;
  }
}

const input = (path: string): Node => ({ op: 'input', path });
const id = (name: string): Node => ({ op: 'id', name });
const str = (value: string): Node => ({ op: 'string', value });
const int = (value: number): Node => ({ op: 'int', value });
const list = (...items: Node[]): Node => ({ op: 'list', items });
const call = (fn: string, ...args: Node[]): Node => ({ op: 'call', fn, args });
const method = (target: Node, fn: string, ...args: Node[]): Node => ({
  op: 'method',
  target,
  fn,
  args,
});
const bin = (
  operator: Extract<Node, { op: 'binary' }>['operator'],
  left: Node,
  right: Node,
): Node => ({
  op: 'binary',
  operator,
  left,
  right,
});
const macro = (
  target: Node,
  name: Extract<Node, { op: 'macro' }>['macro'],
  iter: string,
  body: Node,
): Node => ({ op: 'macro', target, macro: name, iter, body });

/** What a value of the chain is: strings, bytes, or a list of strings. */
type Kind = 'string' | 'bytes' | 'list';
interface Value {
  kind: Kind;
  node: Node;
}

/** `v` as a value of `kind`, keeping its size (a list is joined, a string wrapped in a list). */
function as(v: Value, kind: Kind): Node {
  if (v.kind === kind) return v.node;
  const text =
    v.kind === 'list'
      ? method(v.node, 'join', str(''))
      : v.kind === 'bytes'
        ? call('string', v.node)
        : v.node;
  if (kind === 'string') return text;
  return kind === 'list' ? list(text) : call('bytes', text);
}

const S = (node: Node): Value => ({ kind: 'string', node });
const L = (node: Node): Value => ({ kind: 'list', node });
const B = (node: Node): Value => ({ kind: 'bytes', node });

/** The first value of a chain, read from the request or the settings, or a literal. */
const SEEDS: ((lit: string) => Value)[] = [
  () => L(list(input('object.metadata.name'))),
  () => S(input('object.metadata.name')),
  () => L(input('params.items')),
  () => S(input('params.seed')),
  () =>
    L(
      macro(input('object.data'), 'map', 'k', {
        op: 'index',
        target: input('object.data'),
        key: id('k'),
      }),
    ),
  (lit) => S(bin('+', input('object.metadata.name'), str(lit))),
  () => B(call('bytes', input('object.metadata.name'))),
  (lit) => L(list(str(lit), input('params.seed'), input('object.metadata.name'))),
  (lit) => B({ op: 'bytes', value: `a${lit}` }),
  () => S(bin('+', input('object.metadata.name'), input('params.seed'))),
  // As large as the request: the static estimate sees a unit object, the runtime meter the real one.
  () =>
    L(
      macro(
        input('object.data'),
        'map',
        'k',
        bin('+', id('k'), { op: 'index', target: input('object.data'), key: id('k') }),
      ),
    ),
  (lit) =>
    S(
      method(
        macro(input('object.data'), 'map', 'k', {
          op: 'index',
          target: input('object.data'),
          key: id('k'),
        }),
        'join',
        str(lit),
      ),
    ),
];

type Step = (a: Value, b: Value, lit: string) => Value;

/**
 * The steps of a chain, by the kind of value they make: the next value from `a` (the previous
 * one) and `b` (any earlier one, `a` itself included). Most grow: `a + a` doubles,
 * `replace('', b)` multiplies, a comprehension nested in another squares.
 */
const STEPS: Record<Kind, Step[]> = {
  list: [
    (a, b) => L(bin('+', as(a, 'list'), as(b, 'list'))),
    (a) => L(macro(as(a, 'list'), 'map', 'x', bin('+', id('x'), id('x')))),
    (a, b, lit) =>
      L(
        macro(
          as(a, 'list'),
          'map',
          'x',
          method(macro(as(b, 'list'), 'map', 'y', bin('+', id('x'), id('y'))), 'join', str(lit)),
        ),
      ),
    (a, b) =>
      L(
        bin(
          '+',
          macro(as(a, 'list'), 'filter', 'x', bin('>=', call('size', id('x')), int(0))),
          as(b, 'list'),
        ),
      ),
    (a, b) =>
      L({
        op: 'bind',
        name: 't',
        value: bin('+', as(a, 'list'), as(b, 'list')),
        body: bin('+', id('t'), id('t')),
      }),
    (a, b) =>
      L({
        op: 'bind',
        name: 'm',
        value: {
          op: 'map',
          entries: [
            [str('l'), as(a, 'list')],
            [str('r'), as(b, 'list')],
          ],
        },
        body: bin(
          '+',
          { op: 'index', target: id('m'), key: str('l') },
          { op: 'index', target: id('m'), key: str('r') },
        ),
      }),
    (a, b, lit) =>
      L(
        bin(
          '+',
          method(bin('+', as(a, 'string'), as(b, 'string')), 'split', str(lit)),
          as(a, 'list'),
        ),
      ),
    (a, b, lit) =>
      L(bin('+', as(a, 'list'), list(as(b, 'string'), str(lit), input('object.metadata.name')))),
    (a, b, lit) =>
      L({
        op: 'cond',
        // n × m iterations whatever the answer: every inner `all` runs to its end.
        test: macro(
          as(a, 'list'),
          'all',
          'x',
          macro(as(b, 'list'), 'all', 'y', bin('!=', id('x'), bin('+', id('y'), str(`#${lit}`)))),
        ),
        then: bin('+', as(a, 'list'), as(b, 'list')),
        otherwise: as(a, 'list'),
      }),
    (a, b, lit) =>
      L({
        op: 'cond',
        test: macro(
          as(a, 'list'),
          'exists',
          'x',
          macro(
            as(b, 'list'),
            'exists',
            'y',
            bin('==', id('x'), bin('+', id('y'), str(`#${lit}`))),
          ),
        ),
        then: as(a, 'list'),
        otherwise: bin('+', as(b, 'list'), as(a, 'list')),
      }),
  ],
  string: [
    (a, b) => S(bin('+', as(a, 'string'), as(b, 'string'))),
    (a) => S(method(as(a, 'string'), 'replace', str('a'), str('aa'))),
    (a, b) => S(method(as(a, 'string'), 'replace', str(''), as(b, 'string'))),
    (a, b, lit) => S(method(list(as(a, 'string'), as(b, 'string')), 'join', str(lit))),
    (a, b) => S(method(str('%s%s'), 'format', list(as(a, 'string'), as(b, 'string')))),
    (a, b) =>
      S(
        method(
          str('%s'),
          'format',
          list({
            op: 'map',
            entries: [
              [str('k'), a.node],
              [str('j'), b.node],
            ],
          }),
        ),
      ),
    (a, b) => S(method(method(as(a, 'string'), 'split', str('')), 'join', as(b, 'string'))),
    (a, b) => S(bin('+', as(a, 'string'), bin('+', input('params.seed'), as(b, 'string')))),
  ],
  bytes: [
    (a, b) => B(bin('+', as(a, 'bytes'), as(b, 'bytes'))),
    (a, b) => B(call('bytes', bin('+', as(a, 'string'), as(b, 'string')))),
  ],
};
const KINDS: Kind[] = ['list', 'string', 'bytes'];

/** The boolean a chain ends in: what a validation or a matchCondition checks. */
const CHECKS: ((z: Value, lit: string) => Node)[] = [
  (z) => bin('>', call('size', z.node), int(0)),
  (z) => bin('<', call('size', z.node), int(0)),
  (z) => bin('==', z.node, z.node),
  (z, lit) =>
    z.kind === 'list'
      ? macro(z.node, 'exists', 'x', bin('==', id('x'), str(lit)))
      : method(as(z, 'string'), 'contains', str(`#${lit}`)),
  (z, lit) => bin('in', str(lit), as(z, 'list')),
  (z, lit) =>
    macro(
      as(z, 'list'),
      'all',
      'x',
      macro(as(z, 'list'), 'all', 'y', bin('!=', id('x'), bin('+', id('y'), str(`#${lit}`)))),
    ),
  (z, lit) => method(as(z, 'string'), 'startsWith', str(lit)),
];

/** The string a chain ends in when it builds a messageExpression. */
const MESSAGES: ((z: Value) => Node)[] = [
  (z) => as(z, 'string'),
  (z) => bin('+', str('size '), call('string', call('size', z.node))),
  (z) => method(str('grew to %s'), 'format', list(z.node)),
];

type Placement = 'variables' | 'bind';
type Consumer = 'validation' | 'matchCondition' | 'messageExpression';

interface HostileCase {
  /** Which of SEEDS starts the chain. */
  start: number;
  length: number;
  /** `turn` 0 switches to the kind `to` (a conversion: join, split, bytes(), string()). */
  steps: { op: number; pick: number; lit: string; turn: number; to: number }[];
  placement: Placement;
  consumer: Consumer;
  check: number;
  failurePolicy: 'Fail' | 'Ignore';
  timeoutSeconds: number;
  settings: { seed: string; items: string[] };
  /** The hostile requests' objects; `bulk` more keys of `bulkChars` characters each in `data`. */
  objects: { name: string; data: Record<string, string>; bulk: number; bulkChars: number }[];
}

const MAX_STEPS = 40;
/** The CRD's limit on one expression. */
const MAX_EXPRESSION_CHARS = 5120;

const literal = fc.stringMatching(/^[ab#-]{0,6}$/);
/** Cases whose chain starts at one of `start`, `length` steps long, with requests of `bulk` more keys. */
const cases = (
  start: fc.Arbitrary<number>,
  length: fc.Arbitrary<number>,
  bulk: fc.Arbitrary<number>,
): fc.Arbitrary<HostileCase> =>
  fc.record({
    start,
    length,
    steps: fc.array(
      fc.record({
        op: fc.nat({ max: 19 }),
        pick: fc.nat({ max: 50 }),
        lit: literal,
        turn: fc.nat({ max: 5 }),
        to: fc.nat({ max: KINDS.length - 1 }),
      }),
      { minLength: MAX_STEPS, maxLength: MAX_STEPS },
    ),
    placement: fc.constantFrom<Placement>('variables', 'bind'),
    consumer: fc.constantFrom<Consumer>('validation', 'matchCondition', 'messageExpression'),
    check: fc.nat({ max: 20 }),
    failurePolicy: fc.constantFrom<'Fail' | 'Ignore'>('Fail', 'Ignore'),
    timeoutSeconds: fc.integer({ min: 1, max: 5 }),
    settings: fc.record({
      seed: fc.stringMatching(/^[ab]{1,32}$/),
      items: fc.array(fc.stringMatching(/^[a-c]{0,8}$/), { maxLength: 6 }),
    }),
    objects: fc.array(
      fc.record({
        name: fc.stringMatching(/^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$/),
        data: fc.dictionary(fc.stringMatching(/^[a-z]{1,8}$/), fc.stringMatching(/^[ab]{0,40}$/), {
          maxKeys: 4,
        }),
        bulk,
        bulkChars: fc.integer({ min: 1, max: 64 }),
      }),
      { minLength: 3, maxLength: 3 },
    ),
  });

/** The SEEDS that read object.data: a chain from them grows with the request. */
const REQUEST_SEEDS = SEEDS.flatMap((seed, i) =>
  print(seed('').node).includes('object.data') ? [i] : [],
);

const hostileCase = fc.oneof(
  {
    weight: 2,
    arbitrary: cases(
      fc.nat({ max: SEEDS.length - 1 }),
      fc.integer({ min: 1, max: MAX_STEPS }),
      fc.constantFrom(0, 0, 100, 1000, 3000),
    ),
  },
  // Short chains over large requests: the static estimate (a unit-size object) lets them
  // load, and the runtime meter has to stop them.
  {
    weight: 1,
    arbitrary: cases(
      fc.constantFrom(...REQUEST_SEEDS),
      fc.integer({ min: 1, max: 6 }),
      fc.constantFrom(1000, 3000),
    ),
  },
);

interface HostileSpec {
  variables?: { name: string; expression: string }[];
  matchConditions?: { name: string; expression: string }[];
  validations: { expression: string; message?: string; messageExpression?: string }[];
  failurePolicy: 'Fail' | 'Ignore';
  timeoutSeconds: number;
  settings: HostileCase['settings'];
}

/** The chain of a case, `length` steps long: each value's node and the reference to it. */
function chain(c: HostileCase, length: number, ref: (i: number) => Node) {
  const first = c.steps[0]!;
  const values: Value[] = [SEEDS[c.start]!(first.lit)];
  const refs: Value[] = [{ kind: values[0]!.kind, node: ref(0) }];
  for (let i = 1; i <= length; i++) {
    const step = c.steps[i - 1]!;
    const a = refs[i - 1]!;
    const b = refs[i - 1 - (step.pick % i)]!;
    const steps = STEPS[step.turn === 0 ? KINDS[step.to]! : a.kind];
    const next = steps[step.op % steps.length]!(a, b, step.lit);
    values.push(next);
    refs.push({ kind: next.kind, node: ref(i) });
  }
  return { values, last: refs[length]! };
}

/** The Policy spec (less policyServer and rules) of a case. */
function hostileSpec(c: HostileCase): HostileSpec {
  const lit = c.steps[0]!.lit;
  const ends = (z: Value) =>
    c.consumer === 'messageExpression'
      ? MESSAGES[c.check % MESSAGES.length]!(z)
      : CHECKS[c.check % CHECKS.length]!(z, lit);
  const common = {
    failurePolicy: c.failurePolicy,
    timeoutSeconds: c.timeoutSeconds,
    settings: c.settings,
  };
  const consume = (expression: string): HostileSpec => {
    switch (c.consumer) {
      case 'validation':
        return { ...common, validations: [{ expression, message: 'hostile' }] };
      case 'matchCondition':
        return {
          ...common,
          matchConditions: [{ name: 'grows', expression }],
          validations: [{ expression: "object.metadata.name != 'hostile'" }],
        };
      case 'messageExpression':
        // A false validation, so that every request evaluates the message.
        return {
          ...common,
          validations: [
            {
              expression: 'size(object.metadata.name) < 0',
              message: 'hostile',
              messageExpression: expression,
            },
          ],
        };
    }
  };
  if (c.placement === 'variables') {
    const { values, last } = chain(c, c.length, (i) => input(`variables.v${i}`));
    return {
      ...consume(print(ends(last))),
      variables: values.map((v, i) => ({ name: `v${i}`, expression: print(v.node) })),
    };
  }
  // One expression: cel.bind(v0, seed, cel.bind(v1, step1, ... end)); shortened to fit the CRD.
  for (let length = c.length; ; length--) {
    const { values, last } = chain(c, length, (i) => id(`v${i}`));
    const expression = print(
      values.reduceRight<Node>(
        (body, v, i) => ({ op: 'bind', name: `v${i}`, value: v.node, body }),
        ends(last),
      ),
    );
    if (expression.length <= MAX_EXPRESSION_CHARS || length === 0) return consume(expression);
  }
}

// ---------------------------------------------------------------- the test

const kc = testKubeConfig();
const custom = kc.makeApiClient(CustomObjectsApi);
const namespace = uniqueName('ps-hostile');
const server = uniqueName('srv');
const ps = new TestPolicyServer({ namespace, server, podName: 'policy-server-under-test' });
const canary = `${server}-canary`;
const group = { group: 'rollcall.dev', version: 'v1alpha1' };
const rules = [
  { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['configmaps'] },
];
/** The canary's answers, and /readyz's, must come within this. */
const CANARY_MS = 1000;
const runs = Number(process.env.ROLLCALL_HOSTILE_RUNS ?? 25);
const seed = process.env.ROLLCALL_HOSTILE_SEED
  ? Number(process.env.ROLLCALL_HOSTILE_SEED)
  : Math.floor(Math.random() * 2 ** 31);
const replayPath = process.env.ROLLCALL_HOSTILE_PATH;

function review(
  uid: string,
  object: { name: string; data: Record<string, string>; bulk?: number; bulkChars?: number },
) {
  const data = { ...object.data };
  for (let i = 0; i < (object.bulk ?? 0); i++) data[`k${i}`] = 'a'.repeat(object.bulkChars ?? 1);
  return configMapReview(uid, namespace, object.name, data);
}

interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: { code?: number; message?: string; reason?: string };
  warnings?: string[];
}

/** What a request got: the response and how long it took, or what went wrong. */
type Answer =
  | { ok: true; ms: number; response: AdmissionResponse }
  | { ok: false; ms: number; problem: string };

describe('rollcall policy-server under generated hostile policies', () => {
  const created: string[] = [];
  let logFile: string;
  let port: number;
  let exited: string | undefined;

  /** POST or GET over HTTPS with a client-side timeout; never throws. */
  const call = async (
    method: string,
    path: string,
    timeoutMs: number,
    body?: unknown,
  ): Promise<{ ms: number; res?: HttpsAnswer; error?: string }> => {
    const t = performance.now();
    try {
      const res = await httpsRequest(
        {
          host: '127.0.0.1',
          port,
          method,
          path,
          ca: ps.ca,
          agent: false,
          timeout: timeoutMs,
          headers: { 'content-type': 'application/json' },
        },
        body === undefined ? undefined : JSON.stringify(body),
      );
      return { ms: performance.now() - t, res };
    } catch (err) {
      return { ms: performance.now() - t, error: err instanceof Error ? err.message : String(err) };
    }
  };

  const admit = async (
    path: string,
    body: ReturnType<typeof review>,
    timeoutMs: number,
  ): Promise<Answer> => {
    const { ms, res, error } = await call('POST', path, timeoutMs, body);
    if (!res) return { ok: false, ms, problem: `no answer: ${error}` };
    if (res.status !== 200)
      return { ok: false, ms, problem: `HTTP ${res.status}: ${res.body.slice(0, 300)}` };
    let parsed: { kind?: string; response?: AdmissionResponse };
    try {
      parsed = JSON.parse(res.body) as typeof parsed;
    } catch {
      return { ok: false, ms, problem: `not JSON: ${res.body.slice(0, 300)}` };
    }
    if (parsed.kind !== 'AdmissionReview' || !parsed.response)
      return { ok: false, ms, problem: `not an AdmissionReview: ${res.body.slice(0, 300)}` };
    if (parsed.response.uid !== body.request.uid)
      return { ok: false, ms, problem: `uid ${parsed.response.uid}, expected ${body.request.uid}` };
    return { ok: true, ms, response: parsed.response };
  };

  before(async () => {
    await ps.prepare();
    await custom.createClusterCustomObject({
      ...group,
      plural: 'policies',
      body: policyManifest(canary, server, {
        rules,
        timeoutSeconds: 5,
        validations: [
          {
            expression: "object.metadata.name != 'forbidden'",
            messageExpression: "'the name ' + object.metadata.name + ' is taken'",
          },
        ],
      }),
    });
    created.push(canary);

    const started = await ps.start({
      logName: 'policy-server-hostile.log',
      env: {
        LOG_LEVEL: 'info',
        // A heap bounded as a container's memory limit would bound it: a policy that
        // allocates without limit kills this process instead of the machine.
        NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --max-old-space-size=512`.trim(),
      },
    });
    ({ port, logFile } = started);
    started.child.once(
      'exit',
      (code, signal) => (exited = `exited with code ${code}, signal ${signal}`),
    );
    await until(
      '/readyz 200 with the canary Loaded',
      async () => {
        const r = await call('GET', '/readyz', 2000);
        return r.res?.status === 200 ? true : undefined;
      },
      { timeoutMs: 60_000, everyMs: 100 },
    );
  });

  after(async () => {
    ps.kill();
    for (const name of created)
      await custom
        .deleteClusterCustomObject({ ...group, plural: 'policies', name })
        .catch(() => {});
    await ps.cleanUp();
  });

  test('no generated policy stops the process, fails /readyz, delays the canary past 1 s or goes unanswered within its timeout', async () => {
    console.log(
      `# hostile policies: seed ${seed}, ${runs} cases (replay: ROLLCALL_HOSTILE_SEED=${seed}${replayPath ? ` ROLLCALL_HOSTILE_PATH=${replayPath}` : ''})`,
    );
    let caseNumber = 0;
    const started = performance.now();
    await fc.assert(
      fc.asyncProperty(hostileCase, async (c) => {
        const n = ++caseNumber;
        const name = `${server}-h${n}`;
        const spec = hostileSpec(c);
        const problems: string[] = [];
        const caseStart = performance.now();

        // Beside the case, from the Policy's creation to its end: /readyz, the canary.
        let running = true;
        const readyz: number[] = [];
        const probing = (async () => {
          while (running) {
            const { ms, res, error } = await call('GET', '/readyz', CANARY_MS);
            readyz.push(ms);
            // A replica is unready while it loads a new generation, by design: not while it evaluates.
            const loading =
              res?.status === 503 && res.body.includes(`loading ${name} generation 1`);
            if (!res) problems.push(`/readyz did not answer within ${CANARY_MS} ms (${error})`);
            else if (res.status !== 200 && !loading)
              problems.push(`/readyz answered ${res.status}: ${res.body.trim()}`);
            else if (ms > CANARY_MS) problems.push(`/readyz took ${ms.toFixed(0)} ms`);
            await sleep(100);
          }
        })();
        const canaryMs: number[] = [];
        const canarying = (async () => {
          for (let i = 0; running; i++) {
            const forbidden = i % 2 === 0;
            const objectName = forbidden ? 'forbidden' : `fine-${i}`;
            const a = await admit(
              `/validate/${canary}/1`,
              review(`canary-${n}-${i}`, { name: objectName, data: {} }),
              CANARY_MS + 1000,
            );
            canaryMs.push(a.ms);
            if (!a.ok)
              problems.push(`canary ${objectName}: ${a.problem} after ${a.ms.toFixed(0)} ms`);
            else if (a.ms > CANARY_MS)
              problems.push(`canary ${objectName}: answered after ${a.ms.toFixed(0)} ms`);
            else if (a.response.allowed === forbidden)
              problems.push(`canary ${objectName}: wrong answer ${JSON.stringify(a.response)}`);
            else if (forbidden && a.response.status?.message !== 'the name forbidden is taken')
              problems.push(`canary forbidden: wrong message ${JSON.stringify(a.response.status)}`);
            await sleep(50);
          }
        })();

        let state = 'not reported';
        let message: string | undefined;
        const hostile: Answer[] = [];
        try {
          await custom.createClusterCustomObject({
            ...group,
            plural: 'policies',
            body: policyManifest(name, server, { rules, ...spec }),
          });
          created.push(name);
          const entry = await until(
            `${name} generation 1 Loaded or Failed in the report`,
            async () => {
              const e = (await ps.report())[name];
              return e?.generation === 1 && (e.state === 'Loaded' || e.state === 'Failed')
                ? e
                : undefined;
            },
            { timeoutMs: 20_000, everyMs: 100 },
          ).catch((err: unknown) => {
            problems.push(String(err));
            return undefined;
          });
          state = entry?.state ?? state;
          message = entry?.message;
          // A failed load must say where and why (an estimate over the budget, a CEL error).
          if (
            entry?.state === 'Failed' &&
            !/^spec\.[A-Za-z]+\[\d+\]\.[A-Za-z]+: \S/.test(entry.message ?? '')
          )
            problems.push(
              `Failed without a field path and a reason: ${JSON.stringify(entry.message)}`,
            );

          const limitMs = c.timeoutSeconds * 1000;
          hostile.push(
            ...(await Promise.all(
              c.objects.map((object, i) =>
                admit(`/validate/${name}/1`, review(`hostile-${n}-${i}`, object), limitMs + 1000),
              ),
            )),
          );
          for (const [i, a] of hostile.entries()) {
            if (!a.ok) {
              problems.push(`hostile request ${i}: ${a.problem} after ${a.ms.toFixed(0)} ms`);
              continue;
            }
            if (a.ms > limitMs)
              problems.push(
                `hostile request ${i}: answered after ${a.ms.toFixed(0)} ms, over timeoutSeconds ${c.timeoutSeconds}`,
              );
            const r = a.response;
            // An error (a cost limit, a timeout, a generation not loaded) is answered by the failurePolicy.
            if (r.status?.reason === 'InternalError' && c.failurePolicy !== 'Fail')
              problems.push(
                `hostile request ${i}: denied as an error under failurePolicy Ignore: ${r.status.message}`,
              );
            if (r.allowed && r.warnings?.some((w) => w.includes('failurePolicy Fail')))
              problems.push(
                `hostile request ${i}: allowed under failurePolicy Fail: ${r.warnings.join('; ')}`,
              );
          }
          await sleep(300); // the canary and /readyz a little after the last answer too
        } finally {
          running = false;
          await Promise.all([probing, canarying]);
          await custom
            .deleteClusterCustomObject({ ...group, plural: 'policies', name })
            .catch(() => {});
        }
        if (exited) problems.push(`the policy server ${exited} (log: ${logFile})`);

        const max = (xs: number[]) => (xs.length ? Math.max(...xs) : 0).toFixed(0);
        const answers = hostile
          .map((a) =>
            a.ok
              ? `${a.response.allowed ? 'allowed' : 'denied'} ${a.ms.toFixed(0)} ms${a.response.status?.message ? ` (${a.response.status.message.slice(0, 100)})` : a.response.warnings ? ` (${a.response.warnings[0]!.slice(0, 100)})` : ''}`
              : `none ${a.ms.toFixed(0)} ms`,
          )
          .join('; ');
        console.log(
          `# case ${n}: ${c.placement} → ${c.consumer}, ${c.length} steps, ${c.failurePolicy}/${c.timeoutSeconds}s, requests of +${c.objects.map((o) => o.bulk).join('/')} keys: ${state}${message ? ` (${message.slice(0, 160)})` : ''}; hostile: ${answers}; canary ${canaryMs.length} answers, max ${max(canaryMs)} ms; /readyz max ${max(readyz)} ms; ${((performance.now() - caseStart) / 1000).toFixed(1)} s`,
        );
        if (problems.length > 0) {
          console.log(`# failing case ${n}, policy spec: ${JSON.stringify(spec)}`);
          assert.fail(`case ${n}:\n  ${[...new Set(problems)].slice(0, 20).join('\n  ')}`);
        }
      }),
      {
        seed,
        numRuns: runs,
        // A failed case may have killed or stalled the process: shrinking against it means nothing.
        endOnFailure: true,
        ...(replayPath ? { path: replayPath } : {}),
      },
    );
    console.log(
      `# ${caseNumber} hostile cases in ${((performance.now() - started) / 1000).toFixed(1)} s`,
    );
  });
});
