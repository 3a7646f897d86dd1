// tooling/image/dockerfile.ts: the runtime stage's environment, as the bench starts rollcall with it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { parseDockerfile, runtimeEnv, runtimeStage } from '../../../tooling/image/dockerfile.ts';

const text = `ARG BASE=node:24-slim
FROM \${BASE} AS build
ENV BUILD_ONLY=1
RUN echo one \\
    && echo two
# a comment
FROM \${BASE}
ENV A=1 B=two
# an ENV of the runtime
ENV C=/x=y
USER 1000:1000
`;

test('instructions carry their stage; continuation lines are one instruction, comments none', () => {
  const instructions = parseDockerfile(text);
  assert.deepEqual(
    instructions.map((i) => [i.op, i.stage]),
    [
      ['ARG', -1],
      ['FROM', 0],
      ['ENV', 0],
      ['RUN', 0],
      ['FROM', 1],
      ['ENV', 1],
      ['ENV', 1],
      ['USER', 1],
    ],
  );
  assert.equal(instructions[3]!.args, 'echo one      && echo two');
  assert.deepEqual(
    runtimeStage(instructions).map((i) => i.op),
    ['FROM', 'ENV', 'ENV', 'USER'],
  );
});

test("the runtime's environment: every ENV of the last stage, values split at the first =", () => {
  assert.deepEqual(runtimeEnv(parseDockerfile(text)), { A: '1', B: 'two', C: '/x=y' });
});

test('an ENV in the legacy `key value` form is refused by name, not misread', () => {
  assert.throws(
    () => runtimeEnv(parseDockerfile('FROM x\nENV MALLOC_ARENA_MAX 2\n')),
    /ENV MALLOC_ARENA_MAX: expected key=value/,
  );
});

test('an ENV value with quotes, an escape or a $ is refused, not kept with them', () => {
  for (const line of ['ENV A="1"', "ENV A='1'", 'ENV A=\\1', 'ENV A=$B'])
    assert.throws(() => runtimeEnv(parseDockerfile(`FROM x\n${line}\n`)), /are not read here/);
});

test('property: any runtime environment written as ENV lines reads back exactly; earlier stages never count', () => {
  const key = fc.stringMatching(/^[A-Z_][A-Z0-9_]{0,15}$/);
  const value = fc.stringMatching(/^[A-Za-z0-9_./:=,+-]{0,20}$/);
  const env = fc.dictionary(key, value, { maxKeys: 8 });
  fc.assert(
    fc.property(env, env, fc.integer({ min: 1, max: 3 }), (earlier, runtime, perLine) => {
      const lines = (e: Record<string, string>) => {
        const pairs = Object.entries(e).map(([k, v]) => `${k}=${v}`);
        const out: string[] = [];
        for (let i = 0; i < pairs.length; i += perLine)
          out.push(`ENV ${pairs.slice(i, i + perLine).join(' \\\n    ')}`);
        return out.join('\n# between\n');
      };
      const text = `FROM a AS build\n${lines(earlier)}\nRUN x\nFROM b\n${lines(runtime)}\nUSER 1\n`;
      assert.deepEqual(runtimeEnv(parseDockerfile(text)), { ...runtime });
    }),
    { numRuns: 500 },
  );
});
