// JSON values as Kubernetes' CEL sees them: a JSON integer is an int64, not a double.
//
// JSON.parse gives every number as a JS `number`, which the CEL library reads as a double, so
// `object.spec.replicas + 1` would fail with "no such overload: double + int". The apiserver
// decodes integral JSON numbers as int64, so we convert them to BigInt with one tree walk.

const INT64_LIMIT = 2 ** 63;

/**
 * A copy of `value` (a parsed JSON tree) in which every integral number within int64 is a
 * BigInt. Non-integral numbers, and integers beyond int64, stay doubles. The input is not
 * modified. Caveat: JSON.parse already turned `1.0` into `1` (so it becomes an int here, where
 * the apiserver would keep a double) and rounded integers beyond 2^53.
 */
export function toCelValue(value: unknown): unknown {
  switch (typeof value) {
    case 'number':
      return Number.isInteger(value) && Math.abs(value) < INT64_LIMIT ? BigInt(value) : value;
    case 'object': {
      if (value === null) return null;
      if (Array.isArray(value)) {
        const out = new Array<unknown>(value.length);
        for (let i = 0; i < value.length; i++) out[i] = toCelValue(value[i]);
        return out;
      }
      const source = value as Record<string, unknown>;
      // The CEL library tells a value's type by its `constructor`, and an assignment to
      // "__proto__" would set the prototype: an object with either key becomes a Map.
      if (Object.hasOwn(source, 'constructor') || Object.hasOwn(source, '__proto__')) {
        const map = new Map<string, unknown>();
        for (const key of Object.keys(source)) map.set(key, toCelValue(source[key]));
        return map;
      }
      const out: Record<string, unknown> = {};
      for (const key in source) {
        if (Object.hasOwn(source, key)) out[key] = toCelValue(source[key]);
      }
      return out;
    }
    case 'undefined':
      return null;
    default:
      return value;
  }
}
