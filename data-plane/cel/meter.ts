// The runtime cost meter: every evaluation of a policy runs under a budget of cost units, and
// stops with CostLimitExceeded past it, whatever the policy does (docs/cel.md, "Cost"). The CEL
// library has no cost accounting, so the meter counts from outside: its evaluator's `run`
// (called once per AST node evaluated) is wrapped once per thread, and the nodes whose cost
// depends on their operands (calls, `+`, comparisons, `in`, comprehensions) get a wrapped
// `handle` when the expression is compiled. rollcall's own functions charge before they
// allocate (strings.ts, lists.ts, regex.ts).
//
// A unit is about the time of one node, 20-30 ns (measured: 5-60 ns on the costliest shapes):
// - 1 per AST node evaluated;
// - a function call: CALL_UNITS, the sizes of its operands (it may read them all), then the
//   size of its result (it allocated it); a parse (timestamp, url...) or a match with a
//   pattern that may backtrack costs more; `join` its result's size before allocating it;
// - `a + b`: the size of the result, before allocating it;
// - `==`, `!=`, `<`...: the smaller operand's deep weight (a comparison recurses into lists and
//   maps, stopping at the first difference), and COMPOSITE_OPERATOR_UNITS on lists or maps;
// - `x in list`: the list's length, plus per element the smaller of its and x's deep weights;
// - a comprehension over a map: the map's size (its keys are listed first);
// - sizes: a string or bytes value CHARS_PER_UNIT characters (bytes) per unit, a list its
//   length, a map its entries; a deep weight counts every value inside, once per occurrence;
//   dyn operands their nesting too (the library types them by walking down).
// A budget also bounds memory: what an evaluation allocates is charged before or as it is
// allocated, so 10^7 units allocate at most a few times 10^7 list elements or characters.
// The state is module-level: an evaluation is synchronous (no CEL function here is async), so
// one meter runs at a time in a thread.
import { Environment, type ASTNode } from '@marcbachmann/cel-js';
import { formatCost } from './budget.ts';
import { COMPARISONS } from './syntax.ts';

/**
 * Characters of a string (bytes of a bytes value) per cost unit: the slowest things done per
 * character (counting code points for size(), walking them for charAt, lowerAscii) take 6-8 ns
 * each, so 4 of them cost about a node.
 */
export const CHARS_PER_UNIT = 4;

/**
 * Extra units of a regular expression match whose pattern V8's linear-time engine may not run
 * from the start (cost.ts' analysis): it may backtrack 50,000 times before V8 falls back to
 * that engine, ~0.3 ms.
 */
export const BACKTRACKING_MATCH_UNITS = 10_000;

/**
 * Extra units of a function call: finding the overload and calling it cost a few nodes (a
 * timestamp, duration or URL parse, ~0.3 µs, is charged mostly by this).
 */
export const CALL_UNITS = 3;

/**
 * Extra units of an operator on two lists or maps (`==`, `+`...): the library types both
 * operands and looks the overload up, ~1 µs.
 */
export const COMPOSITE_OPERATOR_UNITS = 30;

/** An evaluation ran past its cost budget. Never swallowed: failurePolicy answers it. */
export class CostLimitExceeded extends Error {
  override readonly name = 'CostLimitExceeded';
  /** Units spent when the budget ran out (past the budget). */
  readonly used: number;
  readonly budget: number;
  constructor(used: number, budget: number) {
    super(`exceeded its runtime cost budget ${formatCost(budget)}`);
    this.used = used;
    this.budget = budget;
  }
}

/**
 * The meter of the evaluation running in this thread. One object per thread (on globalThis):
 * should this module be loaded twice, the wrapped evaluator still charges the one meter.
 */
interface MeterState {
  used: number;
  budget: number;
  /** Thrown again at every later charge: the library catches errors in `||`, `&&`, `exists`. */
  exceeded: CostLimitExceeded | undefined;
  /** Units a function charged for its own result before allocating it (not charged twice). */
  prepaid: number;
  /** The evaluator prototype's `run` is wrapped. */
  installed: boolean;
}

const STATE_KEY = Symbol.for('rollcall.cel.meter');
const state: MeterState = ((globalThis as Record<symbol, MeterState | undefined>)[STATE_KEY] ??= {
  used: 0,
  budget: Infinity,
  exceeded: undefined,
  prepaid: 0,
  installed: false,
});

function overrun(): never {
  throw (state.exceeded ??= new CostLimitExceeded(state.used, state.budget));
}

/** Charges `units` to the running evaluation (nothing happens outside one). */
export function charge(units: number): void {
  if ((state.used += units) > state.budget) overrun();
}

/**
 * Charges the size of the result a function is about to allocate: call it before allocating.
 * The meter then does not charge that result again when the function returns.
 */
export function chargeResult(units: number): void {
  charge(units);
  state.prepaid += units;
}

/** Units of a string (or bytes value) of `length` characters. */
export function stringUnits(length: number): number {
  return Math.ceil(length / CHARS_PER_UNIT);
}

/** The constructors of CEL maps: a JSON object, a Map, or an object without prototype. */
function isPlainObject(value: object): boolean {
  const ctor = (value as { constructor?: unknown }).constructor;
  return ctor === Object || ctor === undefined;
}

/** A CEL list or map. */
function isCollection(value: unknown): value is object {
  return (
    typeof value === 'object' &&
    value !== null &&
    (Array.isArray(value) || value instanceof Map || isPlainObject(value))
  );
}

/** The size of a value as allocated: strings and bytes by length, lists and maps by entries. */
export function shallowSize(value: unknown): number {
  if (typeof value === 'string') return stringUnits(value.length);
  if (typeof value !== 'object' || value === null) return 0;
  if (Array.isArray(value)) return value.length;
  if (value instanceof Uint8Array) return stringUnits(value.length);
  if (value instanceof Map || value instanceof Set) return value.size;
  if (isPlainObject(value)) {
    let entries = 0;
    for (const key in value) if (Object.hasOwn(value, key)) entries++;
    return entries;
  }
  return 0;
}

/**
 * How many levels the library walks to type a list or map it holds as dyn (its first element,
 * a map's first entry, and so on down): it does so for every operand of a dyn operator or
 * function call, ~20 ns a level. Walked here too, a few ns a level.
 */
function nesting(value: unknown): number {
  let levels = 0;
  let inner = value;
  for (;;) {
    if (typeof inner !== 'object' || inner === null) return levels;
    if (Array.isArray(inner)) {
      levels++;
      inner = inner[0];
    } else if (inner instanceof Map) {
      levels++;
      inner = inner.values().next().value;
    } else if (isPlainObject(inner)) {
      levels++;
      let first: unknown;
      for (const key in inner) {
        first = (inner as Record<string, unknown>)[key];
        break;
      }
      inner = first;
    } else return levels;
  }
}

/** The size of an operand the library reads: its allocated size and its nesting. */
function operandUnits(value: unknown): number {
  return typeof value === 'object' && value !== null
    ? shallowSize(value) + nesting(value)
    : shallowSize(value);
}

/**
 * The weight of a list or map inside another, besides its elements: comparing two of them the
 * library looks their `==` up again (~0.3 µs).
 */
const NESTED_COLLECTION_UNITS = 10;

/** Deep weights of lists and maps, computed once per value (CEL values are immutable). */
const weights = new WeakMap<object, number>();

/** A leaf's weight, or undefined for a list or map not weighed yet. */
function knownWeight(value: unknown): number | undefined {
  if (typeof value === 'string') return Math.max(1, stringUnits(value.length));
  if (typeof value !== 'object' || value === null) return 1;
  if (value instanceof Uint8Array) return Math.max(1, stringUnits(value.length));
  if (!Array.isArray(value) && !(value instanceof Map) && !isPlainObject(value)) return 1;
  return weights.get(value);
}

function* entriesOf(value: object): Generator<unknown> {
  if (Array.isArray(value)) yield* value;
  else if (value instanceof Map) {
    for (const [k, v] of value) {
      yield k;
      yield v;
    }
  } else {
    for (const key in value) {
      if (!Object.hasOwn(value, key)) continue;
      yield key;
      yield (value as Record<string, unknown>)[key];
    }
  }
}

/**
 * The deep weight of a value: 1 per value inside it (every occurrence: a list holding the same
 * list twice weighs it twice), strings by their units. What a comparison or a printing of it
 * may cost. Computed without recursion (a value may nest deeper than the stack) and remembered
 * per list and map, so a value built by doubling is weighed in time linear in its parts.
 */
export function deepWeight(value: unknown): number {
  const known = knownWeight(value);
  if (known !== undefined) return known;
  const stack: object[] = [value as object];
  while (stack.length > 0) {
    const node = stack[stack.length - 1]!;
    if (weights.has(node)) {
      stack.pop();
      continue;
    }
    let total = NESTED_COLLECTION_UNITS;
    let pending = false;
    for (const child of entriesOf(node)) {
      const weight = knownWeight(child);
      if (weight === undefined) {
        stack.push(child as object);
        pending = true;
      } else total += weight;
    }
    if (!pending) {
      weights.set(node, total);
      stack.pop();
    }
  }
  return weights.get(value as object)!;
}

/** `a == b`, `a < b`...: a comparison stops at the first difference, so the smaller weighs. */
export function chargeComparison(a: unknown, b: unknown): void {
  if (typeof a === 'string') {
    if (typeof b === 'string' && a !== b) charge(stringUnits(Math.min(a.length, b.length)));
    return;
  }
  if (!isCollection(a) || !isCollection(b)) return; // timestamps, durations, uints: a field or two
  const typing = COMPOSITE_OPERATOR_UNITS + nesting(a) + nesting(b);
  charge(a === b ? typing : typing + Math.min(deepWeight(a), deepWeight(b)));
}

/** `x in list` (and a list's indexOf): compares x with each element; `key in map` hashes it. */
export function chargeMembership(element: unknown, collection: unknown): void {
  if (!Array.isArray(collection)) {
    charge(operandUnits(element) + nesting(collection));
    return;
  }
  let units = collection.length + nesting(element) + nesting(collection);
  if (typeof element === 'string' || (typeof element === 'object' && element !== null)) {
    const weight = deepWeight(element);
    for (const item of collection) {
      if (item !== element && typeof item === typeof element)
        units += Math.min(weight, deepWeight(item));
    }
  }
  charge(units);
}

/** The units `list.join(separator)` will allocate. */
function joinUnits(list: unknown, separator: unknown): number {
  if (!Array.isArray(list)) return 0;
  let chars = typeof separator === 'string' ? separator.length * Math.max(0, list.length - 1) : 0;
  for (const item of list) if (typeof item === 'string') chars += item.length;
  return stringUnits(chars);
}

/**
 * Extra units of the CEL library's functions that cost more than their operands' sizes, by
 * name (operands: the receiver first). Other modules add theirs (regex.ts: `matches`).
 */
const surcharges = new Map<string, (operands: readonly unknown[]) => number>();

/** Functions that parse their text: ~0.3 µs (a timestamp) to ~0.8 µs (a URL) more than a call. */
const PARSING_UNITS: Readonly<Record<string, number>> = {
  timestamp: 10,
  duration: 10,
  url: 25,
  isURL: 25,
  getQuery: 10,
  quantity: 5,
  isQuantity: 5,
};
for (const [name, units] of Object.entries(PARSING_UNITS)) surcharges.set(name, () => units);

/**
 * A quantity is kept exact as BigInts (quantity.ts): parsing n digits takes ~0.4·n^1.5 ns
 * (1 ms for 10^4 digits, 0.4 s for 10^6), more than reading them once.
 */
function digitsUnits(text: unknown): number {
  return typeof text === 'string' && text.length > 1000 ? Math.ceil(text.length ** 1.5 / 50) : 0;
}
for (const name of ['quantity', 'isQuantity'])
  surcharges.set(name, (operands) => PARSING_UNITS[name]! + digitsUnits(operands[0]));

/** Charges `units(operands)` more for each call of the library's function `name`. */
export function surcharge(name: string, units: (operands: readonly unknown[]) => number): void {
  surcharges.set(name, units);
}

type Handle = (this: unknown, ...args: unknown[]) => unknown;

/** An AST node as the library's type checker leaves it: with the handle its evaluation calls. */
interface CheckedNode {
  op: string;
  args: unknown;
  handle?: Handle;
  meta: { alternate?: CheckedNode; macro?: unknown };
}

/** call: handle(operands, ast, ev); rcall: handle(operands, ev, ast). */
function meteredCall(handle: Handle, name: string): Handle {
  const growing = name === 'join';
  const extra = surcharges.get(name);
  return function meteredCallHandle(this: unknown, operands, a, b) {
    const list = operands as unknown[];
    let units = CALL_UNITS;
    for (const operand of list) units += operandUnits(operand);
    if (extra) units += extra(list);
    const prepaid = growing ? joinUnits(list[0], list[1]) : 0;
    charge(units + prepaid);
    state.prepaid = prepaid;
    const result = handle.call(this, operands, a, b);
    const size = shallowSize(result);
    if (size > state.prepaid) charge(size - state.prepaid);
    state.prepaid = 0;
    return result;
  };
}

/** Binary operators: handle(left, right, ast, ev). */
function meteredBinary(handle: Handle, before: (left: unknown, right: unknown) => void): Handle {
  return function meteredBinaryHandle(this: unknown, left, right, a, b) {
    before(left, right);
    return handle.call(this, left, right, a, b);
  };
}

function chargeConcatenation(left: unknown, right: unknown): void {
  if (typeof left === 'string' || left instanceof Uint8Array)
    charge(shallowSize(left) + shallowSize(right));
  else if (isCollection(left))
    charge(COMPOSITE_OPERATOR_UNITS + operandUnits(left) + operandUnits(right));
}

/** A comprehension: handle(range, args, ev, ctx); a map's keys are listed before the loop. */
function meteredComprehension(handle: Handle): Handle {
  return function meteredComprehensionHandle(this: unknown, range, args, ev, ctx) {
    if (!Array.isArray(range)) charge(shallowSize(range));
    return handle.call(this, range, args, ev, ctx);
  };
}

/**
 * `all` and `exists` catch their predicate's errors and go on with the next element (an error
 * is raised only if no element decides); their loop asks `condition` before each element, which
 * now throws an overrun, so a loop past the budget does not throw and catch it once per element.
 */
function stopOnOverrun(comprehension: CheckedNode): void {
  const args = comprehension.args as { condition?: (accu: unknown) => boolean };
  const condition = args.condition;
  if (!condition) return;
  args.condition = function meteredCondition(accu) {
    if (state.exceeded) throw state.exceeded;
    return condition(accu);
  };
}

function instrumentNode(node: CheckedNode): void {
  const handle = node.handle;
  const alternate = node.meta.alternate;
  if (alternate?.op === 'comprehension' && alternate.handle) {
    alternate.handle = meteredComprehension(alternate.handle);
    stopOnOverrun(alternate);
  }
  if (!handle) return; // a macro, a literal, a name, a field
  if (node.op === 'call' || node.op === 'rcall') {
    node.handle = meteredCall(handle, (node.args as [string])[0]);
  } else if (COMPARISONS.has(node.op)) node.handle = meteredBinary(handle, chargeComparison);
  else if (node.op === 'in') node.handle = meteredBinary(handle, chargeMembership);
  else if (node.op === '+') node.handle = meteredBinary(handle, chargeConcatenation);
}

/** The AST nodes among a node's operands (lists, map entries, call arguments...). */
function operandNodes(node: CheckedNode, out: CheckedNode[]): void {
  const collect = (item: unknown): void => {
    if (Array.isArray(item)) item.forEach(collect);
    else if (item && typeof item === 'object' && 'op' in item) out.push(item as CheckedNode);
  };
  collect(node.args);
}

/**
 * Wraps the handles of a checked expression's nodes whose cost depends on their operands'
 * sizes (once per expression; the meter then charges them while it runs).
 */
export function instrument(ast: ASTNode): void {
  const stack: CheckedNode[] = [ast as unknown as CheckedNode];
  while (stack.length > 0) {
    const node = stack.pop()!;
    instrumentNode(node);
    operandNodes(node, stack);
  }
}

/**
 * Wraps the CEL library's evaluator so that each node evaluated costs a unit: once per thread.
 * The evaluator class is not exported; a function handler is called with the evaluator as
 * `this`, so a throwaway environment's probe function hands it over.
 */
export function installMeter(): void {
  if (state.installed) return;
  let evaluator: object | undefined;
  new Environment()
    .registerFunction('rollcallMeterProbe(): bool', function probe(this: object) {
      evaluator = this;
      return true;
    })
    .evaluate('rollcallMeterProbe()');
  const prototype = Object.getPrototypeOf(evaluator) as { run: Handle };
  const run = prototype.run;
  prototype.run = function meteredRun(this: unknown, ast, ctx) {
    if (++state.used > state.budget) overrun();
    return run.call(this, ast, ctx);
  };
  state.installed = true;
}

/**
 * Runs `evaluate` (a synchronous evaluation of instrumented expressions) under `budget` units:
 * its value and the units it used. Throws CostLimitExceeded past the budget, even when the
 * library caught the error inside (an `exists` goes on past a failing element).
 */
export function metered<T>(budget: number, evaluate: () => T): { value: T; cost: number } {
  installMeter();
  const outer = { used: state.used, budget: state.budget, exceeded: state.exceeded };
  state.used = 0;
  state.budget = budget;
  state.exceeded = undefined;
  state.prepaid = 0;
  try {
    const value = evaluate();
    if (state.exceeded) throw state.exceeded;
    return { value, cost: state.used };
  } finally {
    state.used = outer.used;
    state.budget = outer.budget;
    state.exceeded = outer.exceeded;
  }
}

/** The overrun of the running evaluation, if its budget ran out (the library may have caught it). */
export function exceededBudget(): CostLimitExceeded | undefined {
  return state.exceeded;
}
