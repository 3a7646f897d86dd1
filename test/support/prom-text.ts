// A small parser of the Prometheus text exposition format (0.0.4), enough to read rollcall's
// /metrics in tests and benchmarks: HELP/TYPE lines, samples with labels (escaped values), and
// values including +Inf/NaN. Timestamps and exemplars are not used by prom-client and are
// rejected.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface MetricFamily {
  name: string;
  type: string;
  help: string;
  samples: Sample[];
}

const sampleLine = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$/;
const labelPair = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y;

function parseLabels(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  labelPair.lastIndex = 0;
  while (labelPair.lastIndex < text.length) {
    const m = labelPair.exec(text);
    if (!m) throw new Error(`bad labels: {${text}}`);
    labels[m[1]!] = m[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
  }
  return labels;
}

/** A sample value; like Prometheus (Go's ParseFloat), NaN and Inf in any case (prom-client writes `Nan`). */
function parseValue(raw: string): number {
  const special = raw.toLowerCase();
  if (special === '+inf' || special === 'inf') return Infinity;
  if (special === '-inf') return -Infinity;
  if (special === 'nan') return NaN;
  const n = Number(raw);
  if (Number.isNaN(n)) throw new Error(`bad sample value: ${raw}`);
  return n;
}

/** Families by name; a histogram's _bucket/_sum/_count samples belong to its family. */
export function parsePrometheusText(text: string): Map<string, MetricFamily> {
  const families = new Map<string, MetricFamily>();
  const family = (name: string) => {
    let f = families.get(name);
    if (!f) families.set(name, (f = { name, type: 'untyped', help: '', samples: [] }));
    return f;
  };
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const meta = /^#\s+(HELP|TYPE)\s+(\S+)\s*(.*)$/.exec(line);
    if (meta) {
      const f = family(meta[2]!);
      if (meta[1] === 'TYPE') f.type = meta[3]!;
      else f.help = meta[3]!;
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = sampleLine.exec(line);
    if (!m) throw new Error(`bad sample line: ${line}`);
    const name = m[1]!;
    const base =
      [...families.keys()].find(
        (f) =>
          name === f ||
          (/_(bucket|sum|count|total|created)$/.test(name) &&
            name.replace(/_(bucket|sum|count|created)$/, '') === f),
      ) ?? name;
    family(base).samples.push({
      name,
      labels: m[3] ? parseLabels(m[3]) : {},
      value: parseValue(m[4]!),
    });
  }
  return families;
}

/** Sum of the samples named `name` whose labels include `match`. */
export function sumOf(
  families: Map<string, MetricFamily>,
  name: string,
  match: Record<string, string> = {},
): number {
  let total = 0;
  for (const f of families.values())
    for (const s of f.samples)
      if (s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v))
        total += s.value;
  return total;
}

/** Scrapes http://127.0.0.1:<port>/metrics and sums the samples of `name` whose labels include `match`. */
export async function metric(
  port: number,
  name: string,
  match: Record<string, string> = {},
): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, {
    signal: AbortSignal.timeout(5000),
  });
  if (!res.ok) throw new Error(`GET 127.0.0.1:${port}/metrics answered ${res.status}`);
  return sumOf(parsePrometheusText(await res.text()), name, match);
}
