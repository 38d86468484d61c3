import { describe, expect, it } from 'vitest';

import { sparkline } from '../src/sparkline';

function coords(points: string): number[][] {
  return points.split(' ').map(p => p.split(',').map(Number));
}

describe('sparkline', () => {
  it('maps the highest loss to the top and the lowest to the bottom of the box', () => {
    const line = sparkline([3, 2, 1], 100, 20, 0);
    expect(coords(line.points)).toEqual([
      [0, 0],
      [50, 10],
      [100, 20]
    ]);
    expect(line.label).toBe('Loss over the last 3 logs: from 3 to 1');
  });

  it('skips null (NaN) losses without shifting the others', () => {
    const line = sparkline([4, null, 2], 100, 20, 0);
    expect(coords(line.points)).toEqual([
      [0, 0],
      [100, 20]
    ]);
    expect(line.count).toBe(2);
  });

  it('draws a flat series and a single value through the middle', () => {
    expect(coords(sparkline([1, 1, 1], 10, 20, 0).points).map(p => p[1])).toEqual([10, 10, 10]);
    const single = sparkline([0.5], 10, 20, 1);
    expect(coords(single.points)).toEqual([
      [1, 10],
      [9, 10]
    ]);
    expect(single.label).toBe('Loss 0.5');
  });

  it('says so when there is nothing to draw', () => {
    const empty = sparkline([null, null], 10, 10);
    expect(empty.points).toBe('');
    expect(empty.label).toBe('No loss logged yet');
  });
});
