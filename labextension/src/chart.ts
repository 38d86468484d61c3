/**
 * The loss chart's geometry, pure so vitest checks it: series of (x, y) points, smoothed in
 * the space the chart shows (log10 on a log axis: a mean of raw losses is dominated by spikes
 * and sits far above the curve there), scaled into a box, with "nice" ticks.
 */

export type Scale = 'log' | 'linear';
export type XAxis = 'step' | 'time';

export interface IPoint {
  x: number;
  y: number;
}

export interface ISeries {
  label: string;
  points: IPoint[];
  /** A CSS colour; the theme's variables where the chart is themed. */
  color: string;
  dashed?: boolean;
  /** Drawn faint: the run a resumed run continues (its steps before the resume). */
  dimmed?: boolean;
}

/** Only the points a scale can draw: finite, and positive on a log axis. */
export function drawable(points: ReadonlyArray<IPoint>, scale: Scale): IPoint[] {
  return points.filter(p => isFinite(p.x) && isFinite(p.y) && (scale === 'linear' || p.y > 0));
}

/**
 * An exponential moving average with TensorBoard's debiasing, taken in the displayed space:
 * `weight` 0 leaves the curve as it is, 0.99 smooths hard.
 */
export function smooth(points: ReadonlyArray<IPoint>, weight: number, scale: Scale): IPoint[] {
  const w = Math.min(Math.max(weight, 0), 0.999);
  if (w === 0) {
    return [...points];
  }
  const to = scale === 'log' ? Math.log10 : (v: number) => v;
  const from = scale === 'log' ? (v: number) => 10 ** v : (v: number) => v;
  let last = 0;
  let n = 0;
  return points.map(p => {
    last = last * w + (1 - w) * to(p.y);
    n += 1;
    return { x: p.x, y: from(last / (1 - w ** n)) };
  });
}

export interface IBox {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

export interface IScales {
  x: (v: number) => number;
  y: (v: number) => number;
  xTicks: number[];
  yTicks: number[];
}

/** The axes of all series together, so compared runs share them. */
export function scales(series: ReadonlyArray<IPoint[]>, scale: Scale, box: IBox): IScales {
  const all = series.flat();
  const xs = all.map(p => p.x);
  const ys = all.map(p => (scale === 'log' ? Math.log10(p.y) : p.y));
  const [x0, x1] = extent(xs);
  const [y0, y1] = extent(ys);
  const x = (v: number) => box.left + ((box.width - box.left - box.right) * (v - x0)) / (x1 - x0);
  const yAt = (v: number) =>
    box.height - box.bottom - ((box.height - box.top - box.bottom) * (v - y0)) / (y1 - y0);
  const y = (v: number) => yAt(scale === 'log' ? Math.log10(v) : v);
  const logged = scale === 'log' ? logTicks(10 ** y0, 10 ** y1) : [];
  // a range too narrow for three ticks even of 1..9 times a power of ten (a loss from 2.4
  // down to 0.93 would get 1 and 2 alone): round linear values
  const yTicks =
    scale === 'log' && logged.length >= 3
      ? logged
      : niceTicks(scale === 'log' ? 10 ** y0 : y0, scale === 'log' ? 10 ** y1 : y1, 5).filter(
          t => scale === 'linear' || t > 0
        );
  return { x, y, xTicks: niceTicks(x0, x1, 6), yTicks };
}

function extent(values: number[]): [number, number] {
  if (values.length === 0) {
    return [0, 1];
  }
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (hi === lo) {
    lo -= 0.5;
    hi += 0.5;
  }
  return [lo, hi];
}

/** About `count` round numbers between lo and hi (1, 2 or 5 times a power of ten apart). */
export function niceTicks(lo: number, hi: number, count: number): number[] {
  const raw = (hi - lo) / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map(m => m * power).find(s => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push(Number(t.toPrecision(12)));
  }
  return ticks;
}

/**
 * Decades and sub-decades inside the range, as the notebook's summary labels its log axis
 * (views/loss_chart.py): powers of ten alone over 2.5 decades or more, with 2s and 5s below
 * that (a loss from 2 down to 0.02 gets 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2: labels where the loss
 * ends, not only where it began), and every multiple within less than a decade.
 */
export function logTicks(lo: number, hi: number): number[] {
  const ticks: number[] = [];
  const span = Math.log10(hi / lo);
  const multiples = span >= 2.5 ? [1] : span >= 0.7 ? [1, 2, 5] : [1, 2, 3, 4, 5, 6, 7, 8, 9];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    for (const m of multiples) {
      const t = m * 10 ** e;
      if (t >= lo * 0.999 && t <= hi * 1.001) {
        ticks.push(Number(t.toPrecision(6)));
      }
    }
  }
  return ticks;
}

/** An SVG path through the points, jumping over gaps in x order as they come. */
export function path(points: ReadonlyArray<IPoint>, s: IScales): string {
  return points
    .map((p, i) => `${i === 0 ? 'M' : 'L'}${s.x(p.x).toFixed(1)},${s.y(p.y).toFixed(1)}`)
    .join(' ');
}

export function tickLabel(value: number): string {
  const size = Math.abs(value);
  if (size !== 0 && (size < 1e-3 || size >= 1e5)) {
    return value.toExponential(0);
  }
  return String(Number(value.toPrecision(3)));
}
