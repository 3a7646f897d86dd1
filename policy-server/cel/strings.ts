// The parts of cel-go's strings extension that Kubernetes policies use and the CEL library
// lacks: replace, format, charAt, reverse and strings.quote. Indexes count code points, as in Go.
import type { Environment } from '@marcbachmann/cel-js';
import { UnsignedInt } from '@marcbachmann/cel-js/evaluator';
import { timestampString } from './conversions.ts';

function replace(text: string, from: string, to: string, limit = -1n): string {
  if (limit === 0n) return text;
  const all = limit < 0n;
  let left = Number(limit);
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
  const points = [...text];
  if (index < 0n || index > BigInt(points.length)) {
    throw new Error(`index out of range: ${index}`);
  }
  return points[Number(index)] ?? '';
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

function quote(text: string): string {
  let out = '"';
  for (const point of text) out += QUOTE_ESCAPES[point] ?? point;
  return `${out}"`;
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
      if (Array.isArray(value)) return `[${value.map(formatNested).join(', ')}]`;
      const entries = value instanceof Map ? [...value.entries()] : Object.entries(value as object);
      const parts = entries
        .map(([k, v]) => [formatNested(k), formatNested(v)] as const)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return `{${parts.map(([k, v]) => `${k}:${v}`).join(', ')}}`;
    }
    default:
      return String(value);
  }
}

/** Inside a list or map, cel-go quotes strings (as Go's strconv.Quote) and prints doubles as %f. */
function formatNested(value: unknown): string {
  if (typeof value === 'string') return goQuote(value);
  if (typeof value === 'number' && Number.isFinite(value)) return value.toFixed(6);
  return formatValue(value);
}

/** Go's strconv.Quote: escapes, other control characters as \xNN, printable Unicode kept. */
export function goQuote(text: string): string {
  let out = '"';
  for (const point of text) {
    const escaped = QUOTE_ESCAPES[point];
    if (escaped) out += escaped;
    else if (/[\x00-\x1f\x7f]/.test(point)) {
      out += `\\x${point.charCodeAt(0).toString(16).padStart(2, '0')}`;
    } else out += point;
  }
  return `${out}"`;
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
    return Buffer.from(value).toString('hex');
  }
  if (typeof value === 'number' && radix === 16) return value.toString(16);
  const clause = { 10: 'decimal', 2: 'binary', 8: 'octal', 16: 'hex' }[radix] ?? verb;
  throw new Error(
    `error during formatting: ${clause} clause can only be used on integers, was given ${celType(value)}`,
  );
}

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
    },
  );
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
    .registerFunction('string.reverse(): string', (s: string) => [...s].reverse().join(''));
}
