// The sizes the static cost estimate (estimate.ts) reasons with: upper bounds of a value's
// size, element count and element size, and the exact bounds of a value known at load time
// (a literal, or the policy's settings read with literal keys).
import { Optional } from '@marcbachmann/cel-js';

/**
 * Upper bounds of a value. Sizes count values and characters: a scalar is 1, a string or
 * bytes its length (at least 1), a list 1 plus its elements' sizes, a map 1 plus its keys'
 * and values' sizes (see deepSize).
 */
export interface Bound {
  size: number;
  /** How many elements (or keys) it has, when it is a list or a map. */
  count: number;
  /** The size of each element, key or value. */
  element: number;
  /** Its value, when known at load time: a literal, or read from `params` with literal keys. */
  known?: { value: unknown };
}

/** The size of one value read from the request: the smallest request has no larger one. */
export const UNIT: Bound = { size: 1, count: 1, element: 1 };

/** A product where 0 wins over Infinity (no iteration of an unbounded body costs nothing). */
export const times = (a: number, b: number): number => (a === 0 || b === 0 ? 0 : a * b);

export const sizedAs = (size: number): Bound => ({ size, count: size, element: size });

/**
 * The size of a value as the estimate counts it: 1 for a scalar, the length (at least 1) of a
 * string or bytes, 1 plus the sizes of a list's elements or of a map's keys and values, 1 plus
 * the value of an optional. Iterative: settings may nest deeply.
 */
export function deepSize(value: unknown): number {
  let total = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const v = pending.pop();
    if (typeof v === 'string' || v instanceof Uint8Array) {
      total += Math.max(1, v.length);
      continue;
    }
    total += 1;
    if (Array.isArray(v)) pending.push(...v);
    else if (v instanceof Map) for (const [k, item] of v) pending.push(k, item);
    else if (v instanceof Optional) {
      if (v.hasValue()) pending.push(v.value());
    } else if (isPlainObject(v)) {
      for (const [k, item] of Object.entries(v)) pending.push(k, item);
    }
  }
  return total;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== 'object') return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Bounds already computed for the objects of the settings (a path may be read many times). */
export type KnownCache = WeakMap<object, Bound>;

/** The exact bounds of a value known at load time. */
export function knownBound(value: unknown, cache?: KnownCache): Bound {
  const cached = value !== null && typeof value === 'object' ? cache?.get(value) : undefined;
  if (cached) return cached;
  const bound = measure(value);
  if (value !== null && typeof value === 'object') cache?.set(value, bound);
  return bound;
}

function measure(value: unknown): Bound {
  const size = deepSize(value);
  let items: unknown[] | undefined;
  if (Array.isArray(value)) items = value;
  else if (value instanceof Map) items = [...value].flat();
  else if (isPlainObject(value)) items = Object.entries(value).flat();
  if (!items) return { size, count: size, element: size, known: { value } };
  const element = items.reduce<number>((max, item) => Math.max(max, deepSize(item)), 1);
  return { size, count: items.length, element, known: { value } };
}

/** The value at `key` of a known list or map, when it has one. */
export function knownChild(container: unknown, key: unknown): { value: unknown } | undefined {
  if (Array.isArray(container)) {
    const index = typeof key === 'bigint' ? Number(key) : key;
    if (typeof index === 'number' && Number.isInteger(index) && index >= 0)
      return index < container.length ? { value: container[index] } : undefined;
    return undefined;
  }
  if (isPlainObject(container) && typeof key === 'string' && Object.hasOwn(container, key))
    return { value: container[key] };
  return undefined;
}

export const knownString = (b: Bound): string | undefined =>
  typeof b.known?.value === 'string' ? b.known.value : undefined;

/** The length a string operand may have: its own when known, else its size. */
export const lengthOf = (b: Bound): number => knownString(b)?.length ?? b.size;
