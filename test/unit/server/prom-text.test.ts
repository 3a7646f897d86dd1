import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { parsePrometheusText, sumOf } from '../../support/prom-text.ts';

test('the text parser reads what prom-client writes: counters with escaped labels and histograms', async () => {
  const registry = new Registry();
  const c = new Counter({
    name: 'x_total',
    help: 'a counter',
    labelNames: ['verb', 'code'],
    registers: [registry],
  });
  c.inc({ verb: 'pa"tch\\', code: '200' }, 2);
  const h = new Histogram({
    name: 'lat_seconds',
    help: 'h',
    buckets: [1, 5],
    registers: [registry],
  });
  h.observe(3);
  const families = parsePrometheusText(await registry.metrics());
  assert.equal(families.get('x_total')?.type, 'counter');
  assert.equal(sumOf(families, 'x_total', { verb: 'pa"tch\\', code: '200' }), 2);
  assert.equal(families.get('lat_seconds')?.type, 'histogram');
  assert.equal(sumOf(families, 'lat_seconds_bucket', { le: '1' }), 0);
  assert.equal(sumOf(families, 'lat_seconds_bucket', { le: '+Inf' }), 1);
  assert.equal(sumOf(families, 'lat_seconds_count'), 1);
});

test('the text parser rejects garbage instead of guessing', () => {
  assert.throws(() => parsePrometheusText('this is not a metric line at all'), /bad sample line/);
  assert.throws(() => parsePrometheusText('x{a="1" b} 1'), /bad labels/);
});

test('the text parser reads NaN as prom-client writes it (a gauge never set)', async () => {
  const registry = new Registry();
  new Gauge({
    name: 'g',
    help: 'a gauge',
    registers: [registry],
    collect() {
      this.set(NaN);
    },
  });
  assert.ok(Number.isNaN(sumOf(parsePrometheusText(await registry.metrics()), 'g')));
});
