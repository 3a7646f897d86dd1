// A report fuzzer: random and structured-mutation values for the `rollcall.dev/policies`
// annotation — wrong types, huge strings, deep nesting, invalid UTF-8 and lone surrogates,
// duplicate keys — all from one seeded generator.

type Random = () => number;

const int = (random: Random, n: number) => Math.floor(random() * n);
const pick = <T>(random: Random, list: readonly T[]): T => list[int(random, list.length)]!;

/** Strings that break naive readers: lone surrogates, U+FFFD from invalid UTF-8 bytes, NULs, huge ones. */
function nastyString(random: Random): string {
  return pick(random, [
    () => '\ud800',
    () => 'a\udfffb',
    () => Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xe2, 0x82]).toString('utf8'),
    () => '\u0000\u001f"\\',
    () => 'x'.repeat(1 + int(random, 70_000)),
    () => '💥'.repeat(int(random, 600)),
    () => '',
    () => '__proto__',
  ])();
}

function randomJson(random: Random, depth: number): unknown {
  const kinds = depth > 4 ? 5 : 7;
  switch (int(random, kinds)) {
    case 0:
      return null;
    case 1:
      return random() < 0.5;
    case 2:
      return pick(random, [0, -1, 1.5, 2 ** 53 + 1, 1e308, Number.MAX_SAFE_INTEGER, 4]);
    case 3:
      return nastyString(random);
    case 4:
      return pick(random, ['Loaded', 'Failed', 'Loading', 'loaded', 'Ready']);
    case 5:
      return Array.from({ length: int(random, 4) }, () => randomJson(random, depth + 1));
    default:
      return Object.fromEntries(
        Array.from({ length: int(random, 4) }, () => [
          pick(random, [
            'uid',
            'generation',
            'state',
            'message',
            'serving',
            'p',
            nastyString(random),
          ]),
          randomJson(random, depth + 1),
        ]),
      );
  }
}

/** A valid report for `policy` at `generation`, then one to three mutations of it. */
function mutatedReport(random: Random, policy: string, uid: string, generation: number): string {
  const entry: Record<string, unknown> = {
    uid,
    generation,
    state: pick(random, ['Loaded', 'Failed', 'Loading']),
  };
  if (entry.state === 'Failed') entry.message = 'load failed';
  const report: Record<string, unknown> = {
    [policy]: entry,
    other: { uid: 'uid-other', generation: 1, state: 'Loaded' },
  };
  const mutations = [
    () => (entry.uid = pick(random, ['', 7, null, 'x'.repeat(129), 'uid-of-a-deleted-namesake'])),
    () => delete entry.uid,
    () => (entry.generation = pick(random, ['4', 4.5, -1, 0, null, [4], { n: 4 }, 2 ** 64])),
    () => (entry.state = pick(random, ['loaded', 'READY', '', 1, null, ['Loaded']])),
    () =>
      (entry.message = pick(random, [nastyString(random), 42, { text: 'x' }, 'm'.repeat(1025)])),
    () => (entry.serving = pick(random, [generation, generation + 1, 'x', 0])),
    () => (entry[nastyString(random)] = randomJson(random, 0)),
    () => (report[policy] = randomJson(random, 0)),
    () => (report[''] = entry),
    () => delete entry.state,
  ];
  for (let i = 0, n = 1 + int(random, 3); i < n; i++) pick(random, mutations)();
  return JSON.stringify(report);
}

/** Text-level damage: duplicate keys, truncation, deep nesting, raw garbage, non-object tops. */
function textual(random: Random, policy: string, uid: string, generation: number): string {
  const valid = JSON.stringify({ [policy]: { uid, generation, state: 'Loaded' } });
  const head = `{"${policy}":{"uid":${JSON.stringify(uid)},"generation":${generation}`;
  return pick(random, [
    () =>
      `${head},"state":"Failed","message":"first"},"${policy}":{"uid":${JSON.stringify(uid)},"generation":${generation},"state":"Loaded"}}`,
    () => `${head},"state":"Loaded","state":"Failed"}}`,
    () => valid.slice(0, int(random, valid.length)),
    () => '['.repeat(5000 + int(random, 20_000)) + ']'.repeat(int(random, 2) * 5000),
    () => `{"${policy}":`.repeat(1 + int(random, 3000)) + 'null' + '}'.repeat(int(random, 3000)),
    () =>
      Array.from({ length: int(random, 200) }, () =>
        String.fromCharCode(int(random, 0x10000)),
      ).join(''),
    () => pick(random, ['null', 'true', '42', '"Loaded"', '[]', '{}', '']),
    () => JSON.stringify(randomJson(random, 0)),
    () => valid + ' '.repeat(70_000),
  ])();
}

/** One fuzzed annotation value; about half structured mutations, half text-level damage. */
export function fuzzedReport(
  random: Random,
  policy: string,
  uid: string,
  generation: number,
): string {
  return random() < 0.5
    ? mutatedReport(random, policy, uid, generation)
    : textual(random, policy, uid, generation);
}
