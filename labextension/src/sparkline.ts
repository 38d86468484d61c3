/**
 * A loss sparkline as SVG polyline points: the last losses of a run scaled into a small box,
 * plus the words a screen reader says for it.
 */

import { loss } from './format';

export interface ISparkline {
  points: string;
  label: string;
  count: number;
}

/**
 * `values` may hold nulls (a NaN loss is logged as null): they are skipped, the line joins
 * its neighbours. A flat series is drawn through the middle of the box.
 */
export function sparkline(
  values: ReadonlyArray<number | null>,
  width: number,
  height: number,
  pad = 1
): ISparkline {
  const finite = values
    .map((v, i) => [i, v] as [number, number | null])
    .filter((p): p is [number, number] => p[1] !== null && isFinite(p[1]));
  if (finite.length === 0) {
    return { points: '', label: 'No loss logged yet', count: 0 };
  }
  const ys = finite.map(p => p[1]);
  const lo = Math.min(...ys);
  const hi = Math.max(...ys);
  const span = values.length > 1 ? values.length - 1 : 1;
  const x = (i: number) => pad + ((width - 2 * pad) * i) / span;
  const y = (v: number) =>
    hi === lo ? height / 2 : pad + ((height - 2 * pad) * (hi - v)) / (hi - lo);
  const points =
    finite.length === 1
      ? `${pad},${round(y(ys[0]))} ${width - pad},${round(y(ys[0]))}`
      : finite.map(([i, v]) => `${round(x(i))},${round(y(v))}`).join(' ');
  return { points, label: trendLabel(ys), count: finite.length };
}

export function trendLabel(losses: ReadonlyArray<number>): string {
  if (losses.length === 0) {
    return 'No loss logged yet';
  }
  const first = losses[0];
  const last = losses[losses.length - 1];
  if (losses.length === 1) {
    return `Loss ${loss(last)}`;
  }
  return `Loss over the last ${losses.length} logs: from ${loss(first)} to ${loss(last)}`;
}

function round(v: number): number {
  return Math.round(v * 10) / 10;
}
