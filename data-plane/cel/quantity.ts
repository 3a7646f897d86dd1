// Kubernetes' `quantity` CEL library (resource.Quantity: '500m', '1Gi', '1e3'), which the CEL
// library lacks. A quantity is kept as an exact fraction of BigInts, so comparisons and sums are
// exact as in the apiserver.
import type { Environment } from '@marcbachmann/cel-js';

const QUANTITY_SYNTAX = /^([+-]?)(\d*)(?:\.(\d*))?(.*)$/;
const FORMAT_ERROR =
  "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const INT64_MAX = 2n ** 63n - 1n;
const INT64_MIN = -(2n ** 63n);

/** Suffixes: [binary multiplier, decimal exponent]. */
const SUFFIXES: Record<string, readonly [bigint, number]> = {
  '': [1n, 0],
  n: [1n, -9],
  u: [1n, -6],
  m: [1n, -3],
  k: [1n, 3],
  M: [1n, 6],
  G: [1n, 9],
  T: [1n, 12],
  P: [1n, 15],
  E: [1n, 18],
  Ki: [2n ** 10n, 0],
  Mi: [2n ** 20n, 0],
  Gi: [2n ** 30n, 0],
  Ti: [2n ** 40n, 0],
  Pi: [2n ** 50n, 0],
  Ei: [2n ** 60n, 0],
};

/**
 * An exact quantity, `unscaled × 10^scale`, as the apiserver keeps it (so that
 * asApproximateFloat rounds as it does: '12e-1' gives 1.2000000000000002).
 */
export class Quantity {
  readonly unscaled: bigint;
  readonly scale: number;
  constructor(unscaled: bigint, scale: number) {
    this.unscaled = unscaled;
    this.scale = scale;
  }

  /** Both unscaled values at the smaller scale. */
  #aligned(other: Quantity): [bigint, bigint, number] {
    const scale = Math.min(this.scale, other.scale);
    return [
      this.unscaled * 10n ** BigInt(this.scale - scale),
      other.unscaled * 10n ** BigInt(other.scale - scale),
      scale,
    ];
  }

  compareTo(other: Quantity): number {
    const [a, b] = this.#aligned(other);
    return a < b ? -1 : a > b ? 1 : 0;
  }

  add(other: Quantity): Quantity {
    const [a, b, scale] = this.#aligned(other);
    return new Quantity(a + b, scale);
  }

  negate(): Quantity {
    return new Quantity(-this.unscaled, this.scale);
  }

  /**
   * The value as an int64, as the apiserver's AsInt64: only for a scale >= 0, so '1.0' and
   * '1000m' are not integers (the apiserver does not reduce them).
   */
  asInt64(): bigint | undefined {
    if (this.scale < 0) return undefined;
    const value = this.unscaled * 10n ** BigInt(this.scale);
    return value >= INT64_MIN && value <= INT64_MAX ? value : undefined;
  }

  isInteger(): boolean {
    return this.asInt64() !== undefined;
  }

  /** As the apiserver computes it: the unscaled value as a double times 10^scale. */
  approximate(): number {
    const base = Number(this.unscaled);
    return this.scale === 0 ? base : base * Number(`1e${this.scale}`);
  }
}

/** Parses a Kubernetes quantity string; undefined when it is not one. */
export function parseQuantity(text: string): Quantity | undefined {
  if (text === '') return undefined;
  const match = QUANTITY_SYNTAX.exec(text);
  if (!match) return undefined;
  const [, sign = '', whole = '', fraction = '', suffix = ''] = match;
  // As the apiserver: the digits may be empty ('.', 'Ki' and 'e3' are zero).
  let multiplier = SUFFIXES[suffix];
  if (!multiplier) {
    const exponent = /^[eE]([+-]?\d+)$/.exec(suffix);
    if (!exponent?.[1]) return undefined;
    const power = Number(exponent[1]);
    if (Math.abs(power) > 1000) return undefined;
    multiplier = [1n, power];
  }
  const digits = BigInt(`${whole}${fraction}` || '0') * (sign === '-' ? -1n : 1n);
  return new Quantity(digits * multiplier[0], multiplier[1] - fraction.length);
}

/** Parsed quantities by text (they are immutable): most are literals, parsed on every request. */
const parsed = new Map<string, Quantity>();
const PARSED_LIMIT = 1000;

function quantityOf(text: string): Quantity {
  let quantity = parsed.get(text);
  if (!quantity) {
    quantity = parseQuantity(text);
    if (!quantity) throw new Error(FORMAT_ERROR);
    if (parsed.size >= PARSED_LIMIT) parsed.clear();
    parsed.set(text, quantity);
  }
  return quantity;
}

function asInteger(q: Quantity): bigint {
  const value = q.asInt64();
  if (value === undefined) throw new Error('cannot convert value to integer');
  return value;
}

const fromInt = (n: bigint) => new Quantity(n, 0);

/** Registers the `Quantity` type and Kubernetes' quantity functions on `env`. */
export function registerQuantity(env: Environment): void {
  env
    .registerType('Quantity', Quantity)
    .registerFunction('quantity(string): Quantity', quantityOf)
    .registerFunction('isQuantity(string): bool', (s: string) => parseQuantity(s) !== undefined)
    .registerFunction('Quantity.sign(): int', (q: Quantity) => BigInt(q.compareTo(fromInt(0n))))
    .registerFunction('Quantity.compareTo(Quantity): int', (a: Quantity, b: Quantity) =>
      BigInt(a.compareTo(b)),
    )
    .registerFunction(
      'Quantity.isGreaterThan(Quantity): bool',
      (a: Quantity, b: Quantity) => a.compareTo(b) > 0,
    )
    .registerFunction(
      'Quantity.isLessThan(Quantity): bool',
      (a: Quantity, b: Quantity) => a.compareTo(b) < 0,
    )
    .registerFunction('Quantity.add(Quantity): Quantity', (a: Quantity, b: Quantity) => a.add(b))
    .registerFunction('Quantity.add(int): Quantity', (a: Quantity, b: bigint) => a.add(fromInt(b)))
    .registerFunction('Quantity.sub(Quantity): Quantity', (a: Quantity, b: Quantity) =>
      a.add(b.negate()),
    )
    .registerFunction('Quantity.sub(int): Quantity', (a: Quantity, b: bigint) => a.add(fromInt(-b)))
    .registerFunction('Quantity.isInteger(): bool', (q: Quantity) => q.isInteger())
    .registerFunction('Quantity.asInteger(): int', asInteger)
    .registerFunction('Quantity.asApproximateFloat(): double', (q: Quantity) => q.approximate())
    .registerOperator('Quantity == Quantity', (a: Quantity, b: Quantity) => a.compareTo(b) === 0);
}
