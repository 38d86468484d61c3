import { describe, expect, it } from 'vitest';

import * as fmt from '../src/format';

describe('format', () => {
  it('writes durations as m:ss and h:mm:ss', () => {
    expect(fmt.duration(0)).toBe('0:00');
    expect(fmt.duration(83.9)).toBe('1:23');
    expect(fmt.duration(3 * 3600 + 5 * 60 + 7)).toBe('3:05:07');
    expect(fmt.duration(null)).toBe('n/a');
  });

  it('writes losses with four significant digits, tiny ones in exponent form', () => {
    expect(fmt.loss(2.302585)).toBe('2.303');
    expect(fmt.loss(0.01234567)).toBe('0.01235');
    expect(fmt.loss(0.00001234)).toBe('1.23e-5');
    expect(fmt.loss(0)).toBe('0');
    expect(fmt.loss(null)).toBe('n/a');
  });

  it('writes throughput with k and M', () => {
    expect(fmt.rate(950.4)).toBe('950/s');
    expect(fmt.rate(12345)).toBe('12.3k/s');
    expect(fmt.rate(2_500_000)).toBe('2.5M/s');
    expect(fmt.rate(null)).toBe('n/a');
  });

  it('clamps fractions and refuses a zero whole', () => {
    expect(fmt.fraction(5, 10)).toBe(0.5);
    expect(fmt.fraction(12, 10)).toBe(1);
    expect(fmt.fraction(5, 0)).toBeNull();
    expect(fmt.fraction(null, 10)).toBeNull();
  });

  it('writes power with its limit and n/a for unsupported fields', () => {
    expect(fmt.watts(250.4, 700)).toBe('250 / 700 W');
    expect(fmt.watts(250.4, null)).toBe('250 W');
    expect(fmt.watts(null, null)).toBe('n/a');
    expect(fmt.gib(12 * 2 ** 30)).toBe('12.0');
  });
});
