// The result bounds of the policy environment's functions, for the static cost estimate
// (estimate.ts): one rule per function name, from its operands' bounds to its result's and to
// the work it does beyond reading them.
import { knownString, lengthOf, sizedAs, UNIT, type Bound } from './estimate-bounds.ts';

/** The macros the CEL library expands into a loop over their receiver. */
export const COMPREHENSIONS = new Set([
  'all',
  'exists',
  'exists_one',
  'existsOne',
  'map',
  'filter',
]);

/**
 * How many characters `format` prints at most per unit of an argument's size, by clause (see
 * strings.ts): `%s` prints a scalar in at most 30 (a timestamp in a list), a string's
 * characters at most 4 times escaped, plus quotes, brackets and separators that the sizes of
 * lists and maps pay for; `%x` prints a double in up to 272 hex digits; `%.Nf` 24 + N.
 */
const FORMAT_WIDTH: Readonly<Record<string, number>> = {
  s: 32,
  d: 22,
  e: 24,
  o: 24,
  b: 66,
  x: 274,
  X: 274,
};
/** The widest clause, for a template not known at load time (`%x` of a double). */
const WIDEST_FORMAT = 274;
/** The longest text string() gives for a scalar (a double or a timestamp). */
const SCALAR_STRING_CHARS = 32;

/** What a function adds beyond its operands' costs: its result, and the work to compute it. */
interface Outcome extends Bound {
  /** Cost besides evaluating the operands and allocating the result (default: reading them). */
  work?: number;
}

type Rule = (operands: Bound[]) => Outcome;

const sum = (operands: Bound[]) => operands.reduce((total, o) => total + o.size, 0);
const scalar: Rule = () => UNIT;
/** A comparison stops at the end of the shorter operand. */
const comparison: Rule = ([a, b]) => ({ ...UNIT, work: Math.min(a?.size ?? 1, b?.size ?? 1) });
/** A result no larger than `factor` times the subject plus `extra`. */
const linear =
  (factor: number, extra = 0): Rule =>
  ([subject]) =>
    sizedAs(factor * (subject?.size ?? 1) + extra);
/** A list of pieces of the subject (split, findAll): at most one per character, plus one. */
const pieces: Rule = ([subject]) => {
  const s = subject?.size ?? 1;
  return { size: 2 * s + 2, count: s + 1, element: s };
};

/**
 * Result bounds of every function of the policy environment, by name (a name's overloads
 * share its rule). A function not listed is estimated as `unknownFunction`.
 */
const RULES: Readonly<Record<string, Rule>> = {
  // Scalar results, work linear in the operands.
  size: scalar,
  contains: scalar,
  matches: scalar,
  indexOf: scalar,
  lastIndexOf: scalar,
  isSorted: scalar,
  sum: scalar,
  at: scalar,
  bool: scalar,
  int: scalar,
  uint: scalar,
  double: scalar,
  timestamp: scalar,
  duration: scalar,
  type: scalar,
  hasValue: scalar,
  none: scalar,
  quantity: scalar,
  isQuantity: scalar,
  isURL: scalar,
  sign: scalar,
  isInteger: scalar,
  asInteger: scalar,
  asApproximateFloat: scalar,
  add: scalar,
  sub: scalar,
  getDate: scalar,
  getDayOfMonth: scalar,
  getDayOfWeek: scalar,
  getDayOfYear: scalar,
  getFullYear: scalar,
  getHours: scalar,
  getMilliseconds: scalar,
  getMinutes: scalar,
  getMonth: scalar,
  getSeconds: scalar,
  startsWith: comparison,
  endsWith: comparison,
  compareTo: comparison,
  isGreaterThan: comparison,
  isLessThan: comparison,
  // The value itself, one of its elements, or an optional around it.
  dyn: ([v]) => v ?? UNIT,
  min: ([list]) => sizedAs(list?.element ?? 1),
  max: ([list]) => sizedAs(list?.element ?? 1),
  value: ([optional]) => sizedAs(optional?.size ?? 1),
  of: ([v]) => sizedAs(1 + (v?.size ?? 1)),
  or: ([a, b]) => sizedAs(Math.max(a?.size ?? 1, b?.size ?? 1)),
  orValue: ([a, b]) => sizedAs(Math.max(a?.size ?? 1, b?.size ?? 1)),
  // Strings no longer than the subject (or a small multiple of it).
  trim: linear(1),
  substring: linear(1),
  reverse: linear(1),
  find: linear(1),
  json: linear(1),
  url: linear(1),
  getScheme: linear(1),
  getHost: linear(1),
  getHostname: linear(1),
  getPort: linear(1),
  getEscapedPath: linear(1),
  charAt: ([s]) => sizedAs(Math.min(2, s?.size ?? 1)),
  // toLowerCase/toUpperCase turn one UTF-16 unit into at most three ('ﬃ' is 'FFI').
  lowerAscii: linear(3),
  upperAscii: linear(3),
  // Every character escaped, and the quotes.
  quote: linear(2, 2),
  // UTF-8 takes at most 3 bytes per UTF-16 unit; hex 2 characters per byte.
  bytes: linear(3),
  hex: linear(2),
  base64: linear(2, 4),
  string: ([v]) => sizedAs(Math.max(v?.size ?? 1, SCALAR_STRING_CHARS)),
  // Each pair of the query is a key, a list and a value: at most 3 units per character, plus 3.
  getQuery: linear(3, 3),
  split: pieces,
  findAll: pieces,
  replace: ([s, old, replacement]) => {
    const text = s?.size ?? 1;
    const added = replacement ? lengthOf(replacement) : 1;
    const from = old ? knownString(old) : undefined;
    // A non-empty `old` matches at most len(s)/len(old) times; an empty one before every
    // character and at the end.
    const size =
      from !== undefined && from.length > 0
        ? text * Math.max(1, added / from.length)
        : text + (text + 1) * added;
    return sizedAs(Math.max(1, size));
  },
  join: ([list, separator]) => {
    // A list of size S holds at most S - 1 elements, whose characters add up to at most S - 1.
    const within = Math.max(0, (list?.size ?? 1) - 1);
    const elements = Math.min(list?.count ?? within, within);
    const between = separator ? lengthOf(separator) : 0;
    return sizedAs(Math.max(1, within + Math.max(0, elements - 1) * between));
  },
  // Each clause prints one argument; the arguments' sizes add up to less than the list's.
  format: ([template, args]) =>
    sizedAs((template?.size ?? 1) + formatWidth(template) * (args?.size ?? 1)),
};

/** The most characters a unit of argument prints as, with the clauses of `template`. */
function formatWidth(template: Bound | undefined): number {
  const text = template && knownString(template);
  if (text === undefined) return WIDEST_FORMAT;
  let widest = 0;
  for (const [, precision, verb = ''] of text.matchAll(/%(?:\.(\d+))?([a-zA-Z%])/g)) {
    if (verb === '%') continue;
    const width = verb === 'f' ? 24 + Number(precision ?? 6) : FORMAT_WIDTH[verb];
    widest = Math.max(widest, width ?? WIDEST_FORMAT);
  }
  return widest;
}

/** A function the table does not know: as large as its operands together. */
const unknownFunction: Rule = (operands) => sizedAs(Math.max(1, sum(operands)));

/** The names of the functions whose results the estimate bounds (for tests). */
export const ESTIMATED_FUNCTIONS: ReadonlySet<string> = new Set([
  ...Object.keys(RULES),
  ...COMPREHENSIONS,
  'has',
  'bind',
]);

/** What calling `name` gives with these operands, and its work (by default, reading them). */
export function callOutcome(name: string, operands: Bound[]): Bound & { work: number } {
  const { work = sum(operands), ...bound } = (RULES[name] ?? unknownFunction)(operands);
  return { ...bound, work };
}
