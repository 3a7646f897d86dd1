// The parts of cel-go's strings extension that Kubernetes policies use and the CEL library
// lacks: replace, format, charAt, reverse and strings.quote. Indexes count code points, as in Go.
// A function whose result may outgrow its operands charges the cost meter before allocating.
import type { Environment } from '@marcbachmann/cel-js';
import { UnsignedInt } from '@marcbachmann/cel-js/evaluator';
import { timestampString } from './conversions.ts';
import { charge, chargeResult, stringUnits } from './meter.ts';

function codePoints(text: string): number {
  let count = 0;
  for (const _point of text) count++;
  return count;
}

function replace(text: string, from: string, to: string, limit = -1n): string {
  if (limit === 0n) return text;
  const all = limit < 0n;
  let left = Number(limit);
  // The result's size, charged before it is built: a `to` longer than `from` multiplies it.
  let count = 0;
  if (from === '') count = Math.min(codePoints(text) + 1, all ? Infinity : left);
  else {
    for (let at = text.indexOf(from); at >= 0 && (all || count < left); count++)
      at = text.indexOf(from, at + from.length);
  }
  chargeResult(stringUnits(text.length + count * (to.length - from.length)) + count);
  if (from === '') {
    // Go inserts `to` before every code point and at the end.
    const points = [...text];
    let out = '';
    for (const point of points) {
      if (all || left-- > 0) out += to;
      out += point;
    }
    return all || left > 0 ? out + to : out;
  }
  if (all) return text.split(from).join(to);
  let out = '';
  let at = 0;
  while (left-- > 0) {
    const found = text.indexOf(from, at);
    if (found < 0) break;
    out += text.slice(at, found) + to;
    at = found + from.length;
  }
  return out + text.slice(at);
}

function charAt(text: string, index: bigint): string {
  if (index >= 0n && index <= BigInt(text.length)) {
    const wanted = Number(index);
    let at = 0;
    for (const point of text) if (at++ === wanted) return point;
    if (at === wanted) return '';
  }
  throw new Error(`index out of range: ${index}`);
}

/** The code points of `text` in reverse order (without an array of them: `text` may be large). */
function reverse(text: string): string {
  chargeResult(stringUnits(text.length));
  if (text.length <= 256) return [...text].reverse().join('');
  const length = text.length;
  const units = new Uint16Array(length);
  for (let i = 0; i < length; i++) {
    const unit = text.charCodeAt(i);
    const next = i + 1 < length ? text.charCodeAt(i + 1) : 0;
    if (unit >= 0xd800 && unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      // A surrogate pair stays in order.
      units[length - i - 2] = unit;
      units[length - i - 1] = next;
      i++;
    } else units[length - i - 1] = unit;
  }
  return Buffer.from(units.buffer, units.byteOffset, units.byteLength).toString('utf16le');
}

const QUOTE_ESCAPES: Record<string, string> = {
  '\x07': '\\a',
  '\b': '\\b',
  '\f': '\\f',
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t',
  '\v': '\\v',
  '\\': '\\\\',
  '"': '\\"',
};

/** Characters strings.quote (`quote`) or Go's strconv.Quote (`go`) escape, by code unit. */
const QUOTED = new Uint8Array(128);
for (const c of Object.keys(QUOTE_ESCAPES)) QUOTED[c.charCodeAt(0)] = 1;
const GO_QUOTED = QUOTED.map((quoted, code) => (quoted || code < 0x20 || code === 0x7f ? 1 : 0));
const QUOTE_PATTERN = /[\x07\b\f\n\r\t\v\\"]/g;
const GO_QUOTE_PATTERN = /[\x00-\x1f\x7f\\"]/g;

function escapes(text: string, table: Uint8Array): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) count += table[text.charCodeAt(i)] ?? 0;
  return count;
}

function quote(text: string): string {
  const count = escapes(text, QUOTED);
  // Each escape adds a character, and costs about a node to write.
  chargeResult(stringUnits(text.length + count + 2) + count);
  const escaped = count === 0 ? text : text.replace(QUOTE_PATTERN, (c) => QUOTE_ESCAPES[c] ?? c);
  return `"${escaped}"`;
}

/** How `%s` prints a value: cel-go's string conversion. */
export function formatValue(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return value;
    case 'bigint':
    case 'boolean':
      return String(value);
    case 'number':
      return formatDouble(value);
    case 'object': {
      if (value === null) return 'null';
      if (value instanceof UnsignedInt) return value.toString();
      if (value instanceof Uint8Array) return new TextDecoder().decode(value);
      if (value instanceof Date) return timestampString(value);
      // Printed element by element, each charged as it is made: a list that holds the same
      // list twice prints it twice, so the text may be exponentially larger than the value.
      if (Array.isArray(value)) return `[${value.map((v) => paid(formatNested(v))).join(', ')}]`;
      const entries = value instanceof Map ? [...value.entries()] : Object.entries(value as object);
      const parts = entries
        .map(([k, v]) => [paid(formatNested(k)), paid(formatNested(v))] as const)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return `{${parts.map(([k, v]) => `${k}:${v}`).join(', ')}}`;
    }
    default:
      return String(value);
  }
}

/** `text`, once charged to the cost meter. */
function paid(text: string): string {
  charge(stringUnits(text.length));
  return text;
}

/** Inside a list or map, cel-go quotes strings (as Go's strconv.Quote) and prints doubles as %f. */
function formatNested(value: unknown): string {
  if (typeof value === 'string') return goQuote(value);
  if (typeof value === 'number' && Number.isFinite(value)) return value.toFixed(6);
  return formatValue(value);
}

/** Go's strconv.Quote: escapes, other control characters as \xNN, printable Unicode kept. */
export function goQuote(text: string): string {
  const count = escapes(text, GO_QUOTED);
  // Up to 4 characters per escape (\xNN), charged before they are written.
  charge(stringUnits(text.length + 3 * count + 2) + count);
  const escaped =
    count === 0
      ? text
      : text.replace(
          GO_QUOTE_PATTERN,
          (c) => QUOTE_ESCAPES[c] ?? `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`,
        );
  return `"${escaped}"`;
}

/** A double as Go's strconv.FormatFloat(x, 'g', -1, 64) prints it, as cel-go does. */
export function formatDouble(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (!Number.isFinite(value)) return value > 0 ? '+Inf' : '-Inf';
  if (value === 0) return Object.is(value, -0) ? '-0' : '0';
  const [mantissa = '', exponentText = '0'] = value.toExponential().split('e');
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 6) {
    const digits = String(Math.abs(exponent)).padStart(2, '0');
    return `${mantissa}e${exponent < 0 ? '-' : '+'}${digits}`;
  }
  return String(value);
}

/** The CEL type name of a value, as format's errors give it. */
function celType(value: unknown): string {
  if (value === null) return 'null_type';
  if (value instanceof UnsignedInt) return 'uint';
  if (value instanceof Uint8Array) return 'bytes';
  if (Array.isArray(value)) return 'list';
  switch (typeof value) {
    case 'bigint':
      return 'int';
    case 'number':
      return 'double';
    case 'object':
      return 'map';
    default:
      return typeof value;
  }
}

function fixed(value: unknown, precision: number, verb: string): string {
  if (typeof value !== 'number') {
    const clause = verb === 'e' ? 'scientific' : 'fixed-point';
    throw new Error(
      `error during formatting: ${clause} clause can only be used on doubles, was given ${celType(value)}`,
    );
  }
  if (Number.isNaN(value)) return 'NaN';
  if (!Number.isFinite(value)) return value > 0 ? 'Infinity' : '-Infinity';
  return verb === 'e' ? scientific(value) : goFixed(value, precision);
}

const SUPERSCRIPT = '⁰¹²³⁴⁵⁶⁷⁸⁹';

/** cel-go's %e: six decimals and a ×10 exponent in superscript (`1.234568×10⁰³`). */
function scientific(value: number): string {
  const [mantissa = '', exponentText = '0'] = value.toExponential(6).split('e');
  const exponent = Number(exponentText);
  const digits = String(Math.abs(exponent))
    .padStart(2, '0')
    .replace(/\d/g, (d) => SUPERSCRIPT[Number(d)] ?? d);
  return `${mantissa}×10${exponent < 0 ? '⁻' : ''}${digits}`;
}

/** Go's %.Nf: like toFixed, but an exact tie rounds to even (2.5 → "2"), not up. */
function goFixed(value: number, precision: number): string {
  const rounded = value.toFixed(precision);
  if (precision + 40 > 100) return rounded;
  const exact = value.toFixed(precision + 40);
  const rest = exact.slice(exact.length - 40);
  if (!/^50*$/.test(rest)) return rounded;
  // An exact tie: keep the truncated digits when their last one is even.
  const truncated = exact.slice(0, exact.length - 40).replace(/\.$/, '');
  const last = Number(truncated.at(-1));
  return last % 2 === 0 ? truncated : rounded;
}

function integer(value: unknown, radix: number, verb: string): string {
  if (typeof value === 'bigint') return value.toString(radix);
  if (value instanceof UnsignedInt) return value.value.toString(radix);
  if (typeof value === 'boolean' && radix === 2) return value ? '1' : '0';
  if (radix === 16 && (typeof value === 'string' || value instanceof Uint8Array)) {
    // Two hex digits per UTF-8 byte, up to three bytes per character.
    charge(stringUnits((typeof value === 'string' ? 6 : 2) * value.length));
    return Buffer.from(value).toString('hex');
  }
  if (typeof value === 'number' && radix === 16) return value.toString(16);
  const clause = { 10: 'decimal', 2: 'binary', 8: 'octal', 16: 'hex' }[radix] ?? verb;
  throw new Error(
    `error during formatting: ${clause} clause can only be used on integers, was given ${celType(value)}`,
  );
}

/** Units of a formatting clause besides its text: formatting a double takes ~0.5 µs. */
const FORMAT_CLAUSE_UNITS = 10;

/** cel-go's `string.format(list)`: %s %d %f %e %b %o %x %X %%, with an optional `.N` precision. */
export function format(template: string, args: readonly unknown[]): string {
  let next = 0;
  const take = (): unknown => {
    if (next >= args.length) {
      throw new Error(`index ${next} out of range`);
    }
    return args[next++];
  };
  return template.replace(
    /%(?:\.(\d+))?([a-zA-Z%])/g,
    (clause, precision: string | undefined, verb: string) => {
      charge(FORMAT_CLAUSE_UNITS);
      return paid(formatClause(clause, precision, verb));
    },
  );

  function formatClause(clause: string, precision: string | undefined, verb: string): string {
    switch (verb) {
      case '%':
        return '%';
      case 's':
        return formatValue(take());
      case 'd':
        return integer(take(), 10, 'd');
      case 'f':
      case 'e':
        return fixed(take(), precision === undefined ? 6 : Number(precision), verb);
      case 'b':
        return integer(take(), 2, 'b');
      case 'o':
        return integer(take(), 8, 'o');
      case 'x':
        return integer(take(), 16, 'x');
      case 'X':
        return integer(take(), 16, 'X').toUpperCase();
      default:
        throw new Error(
          `could not parse formatting clause: unrecognized formatting clause "${clause}"`,
        );
    }
  }
}

class StringsNamespace {}

/** Registers the strings-extension functions on `env`. */
export function registerStrings(env: Environment): void {
  env
    .registerType('StringsNamespace', StringsNamespace)
    .registerConstant('strings', 'StringsNamespace', new StringsNamespace())
    .registerFunction('StringsNamespace.quote(string): string', (_ns: unknown, s: string) =>
      quote(s),
    )
    .registerFunction('string.replace(string, string): string', (s: string, a: string, b: string) =>
      replace(s, a, b),
    )
    .registerFunction('string.replace(string, string, int): string', replace)
    .registerFunction('string.format(list<dyn>): string', format)
    .registerFunction('string.charAt(int): string', charAt)
    .registerFunction('string.reverse(): string', reverse);
}
