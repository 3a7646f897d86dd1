// Kubernetes' lists library (sum, min, max, isSorted, indexOf, lastIndexOf), which the CEL
// library lacks. Lists from an object are list<dyn>, so each function checks element types at
// run time, as cel-go does for dyn lists. Those that compare elements charge the cost meter
// for what they read (meter.ts).
import type { Environment } from '@marcbachmann/cel-js';
import { UnsignedInt } from '@marcbachmann/cel-js/evaluator';
import { charge, chargeMembership, deepWeight } from './meter.ts';

type Comparable = bigint | number | string | boolean;

function comparable(value: unknown): Comparable {
  if (value instanceof UnsignedInt) return value.value;
  switch (typeof value) {
    case 'bigint':
    case 'number':
    case 'string':
    case 'boolean':
      return value;
    default:
      throw new Error(`no such overload: elements of type ${describe(value)} cannot be compared`);
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'list';
  return typeof value === 'object' ? 'map' : typeof value;
}

function compare(a: unknown, b: unknown): number {
  const x = comparable(a);
  const y = comparable(b);
  const numeric = (v: Comparable) => typeof v === 'bigint' || typeof v === 'number';
  if (typeof x !== typeof y && !(numeric(x) && numeric(y))) {
    throw new Error(`no such overload: cannot compare ${describe(a)} with ${describe(b)}`);
  }
  return x < y ? -1 : x > y ? 1 : 0;
}

/** CEL equality, with ints and doubles compared by value (heterogeneous equality). */
export function celEquals(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a instanceof UnsignedInt) a = a.value;
  if (b instanceof UnsignedInt) b = b.value;
  if (
    (typeof a === 'bigint' || typeof a === 'number') &&
    (typeof b === 'bigint' || typeof b === 'number')
  ) {
    // eslint-disable-next-line eqeqeq -- BigInt and number compare by value with ==
    return a == b;
  }
  if (a instanceof Map) a = Object.fromEntries(a);
  if (b instanceof Map) b = Object.fromEntries(b);
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((v, i) => celEquals(v, b[i]));
  }
  if (a && b && typeof a === 'object' && typeof b === 'object' && !Array.isArray(a)) {
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    const ob = b as Record<string, unknown>;
    return (
      ka.length === kb.length &&
      ka.every((k) => Object.hasOwn(ob, k) && celEquals((a as Record<string, unknown>)[k], ob[k]))
    );
  }
  return false;
}

function sum(list: readonly unknown[]): unknown {
  if (list.length === 0) return 0n;
  let total: bigint | number | undefined;
  for (const item of list) {
    const value = item instanceof UnsignedInt ? item.value : item;
    if (typeof value !== 'bigint' && typeof value !== 'number') {
      throw new Error(`no such overload: sum of ${describe(value)}`);
    }
    if (total === undefined) total = value;
    else if (typeof total === 'bigint' && typeof value === 'bigint') total += value;
    else if (typeof total === 'number' && typeof value === 'number') total += value;
    else throw new Error('no such overload: sum of mixed int and double');
  }
  if (typeof total === 'bigint' && (total > 2n ** 63n - 1n || total < -(2n ** 63n))) {
    throw new Error('integer overflow');
  }
  return total;
}

function extreme(list: readonly unknown[], sign: number, name: string): unknown {
  if (list.length === 0) throw new Error(`${name} called on empty list`);
  charge(deepWeight(list)); // comparing strings reads them
  let best = list[0];
  for (const item of list.slice(1)) if (compare(item, best) * sign > 0) best = item;
  return best;
}

function isSorted(list: readonly unknown[]): boolean {
  charge(deepWeight(list));
  for (let i = 1; i < list.length; i++) if (compare(list[i - 1], list[i]) > 0) return false;
  return true;
}

/** Registers the lists-library functions on `env`. */
export function registerLists(env: Environment): void {
  env
    .registerFunction('list<dyn>.sum(): dyn', sum)
    .registerFunction('list<dyn>.min(): dyn', (l: unknown[]) => extreme(l, -1, 'min'))
    .registerFunction('list<dyn>.max(): dyn', (l: unknown[]) => extreme(l, 1, 'max'))
    .registerFunction('list<dyn>.isSorted(): bool', isSorted)
    .registerFunction('list<dyn>.indexOf(dyn): int', (l: unknown[], x: unknown) => {
      chargeMembership(x, l);
      return BigInt(l.findIndex((v) => celEquals(v, x)));
    })
    .registerFunction('list<dyn>.lastIndexOf(dyn): int', (l: unknown[], x: unknown) => {
      chargeMembership(x, l);
      return BigInt(l.findLastIndex((v) => celEquals(v, x)));
    });
}
