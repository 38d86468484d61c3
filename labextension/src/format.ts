/**
 * One spelling for every number the panel shows (the Python views' `format.py`, in the
 * browser): "n/a" for unknown, GiB for memory, m:ss for durations.
 */

export const NA = 'n/a';

export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return NA;
  }
  const total = Math.max(0, Math.floor(seconds));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const pad = (n: number) => String(n).padStart(2, '0');
  return h ? `${h}:${pad(m)}:${pad(s)}` : `${m}:${pad(s)}`;
}

export function gib(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined ? NA : (bytes / 2 ** 30).toFixed(1);
}

export function percent(value: number | null | undefined): string {
  return value === null || value === undefined ? NA : `${Math.round(value)}%`;
}

/** A loss with four significant digits, in exponent form when very small or large. */
export function loss(value: number | null | undefined): string {
  if (value === null || value === undefined) {
    return NA;
  }
  if (!isFinite(value)) {
    return String(value);
  }
  const size = Math.abs(value);
  return size !== 0 && (size < 1e-3 || size >= 1e5)
    ? value.toExponential(2)
    : Number(value.toPrecision(4)).toString();
}

/** Throughput: 950/s, 12.3k/s, 1.2M/s. */
export function rate(perSecond: number | null | undefined): string {
  if (perSecond === null || perSecond === undefined) {
    return NA;
  }
  if (perSecond >= 1e6) {
    return `${(perSecond / 1e6).toFixed(1)}M/s`;
  }
  if (perSecond >= 1e4) {
    return `${(perSecond / 1e3).toFixed(1)}k/s`;
  }
  return `${Math.round(perSecond)}/s`;
}

export function fraction(
  part: number | null | undefined,
  whole: number | null | undefined
): number | null {
  if (part === null || part === undefined || !whole) {
    return null;
  }
  return Math.min(1, Math.max(0, part / whole));
}

export function watts(draw: number | null, limit: number | null): string {
  if (draw === null && limit === null) {
    return NA;
  }
  const w = (v: number | null) => (v === null ? NA : Math.round(v).toString());
  return limit === null ? `${w(draw)} W` : `${w(draw)} / ${w(limit)} W`;
}

/** A unix time as the local wall clock, HH:MM. */
export function clock(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return NA;
  }
  const t = new Date(seconds * 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${pad(t.getHours())}:${pad(t.getMinutes())}`;
}

/** A file size: 512 B, 1.2 MiB, 3.4 GiB. */
export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) {
    return NA;
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}
