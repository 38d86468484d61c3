/**
 * The loss chart the run page and the comparison draw: SVG whose gridlines, axis text and
 * legend take the theme's CSS variables (readable in dark themes), with the controls a reader
 * needs: smoothing, log/linear, and step/wall-time on the x axis. No JupyterLab imports, so
 * vitest renders it with react-dom/server.
 */

import * as React from 'react';

import { drawable, IBox, ISeries, path, Scale, scales, smooth, tickLabel, XAxis } from './chart';

export interface IChartOptions {
  scale: Scale;
  xAxis: XAxis;
  /** 0..0.99: the smoothing weight. */
  smoothing: number;
}

export const DEFAULT_OPTIONS: IChartOptions = { scale: 'log', xAxis: 'step', smoothing: 0.6 };

const BOX: IBox = { width: 640, height: 280, left: 56, right: 12, top: 10, bottom: 30 };

/** Colours for compared runs, each a theme variable with a fallback. */
export const PALETTE = [
  'var(--jp-brand-color1, #1976d2)',
  'var(--jp-warn-color1, #f57c00)',
  'var(--jp-success-color1, #388e3c)',
  'var(--jp-error-color1, #d32f2f)',
  'var(--jp-accent-color1, #7b1fa2)',
  'var(--jp-brand-color3, #90caf9)'
];

export function ChartControls(props: {
  options: IChartOptions;
  onChange: (options: IChartOptions) => void;
}): JSX.Element {
  const o = props.options;
  const set = (change: Partial<IChartOptions>) => props.onChange({ ...o, ...change });
  return (
    <div className="jp-JiyuChart-controls">
      <label>
        Smoothing
        <input
          type="range"
          min={0}
          max={0.99}
          step={0.01}
          value={o.smoothing}
          aria-label="Smoothing"
          onChange={e => set({ smoothing: Number(e.currentTarget.value) })}
        />
        <span className="jp-JiyuChart-smoothing">{o.smoothing.toFixed(2)}</span>
      </label>
      <label>
        Scale
        <select
          aria-label="Scale"
          value={o.scale}
          onChange={e => set({ scale: e.currentTarget.value as Scale })}
        >
          <option value="log">log</option>
          <option value="linear">linear</option>
        </select>
      </label>
      <label>
        X axis
        <select
          aria-label="X axis"
          value={o.xAxis}
          onChange={e => set({ xAxis: e.currentTarget.value as XAxis })}
        >
          <option value="step">step</option>
          <option value="time">wall time (s)</option>
        </select>
      </label>
    </div>
  );
}

/**
 * Each series drawn raw (faint) and smoothed (solid) when smoothing is on; dashed series
 * (validation) are drawn as they are.
 */
export function LossChart(props: {
  series: ISeries[];
  options: IChartOptions;
  label: string;
}): JSX.Element {
  const { scale, smoothing } = props.options;
  const raw = props.series.map(s => ({ ...s, points: drawable(s.points, scale) }));
  const shown = raw.filter(s => s.points.length > 0);
  if (shown.length === 0) {
    return <p className="jp-JiyuChart-empty">No loss logged yet.</p>;
  }
  const s = scales(
    shown.map(r => r.points),
    scale,
    BOX
  );
  const inner = {
    x0: BOX.left,
    x1: BOX.width - BOX.right,
    y0: BOX.top,
    y1: BOX.height - BOX.bottom
  };
  return (
    <figure className="jp-JiyuChart" aria-label={props.label}>
      <svg
        viewBox={`0 0 ${BOX.width} ${BOX.height}`}
        width="100%"
        role="img"
        aria-label={props.label}
        preserveAspectRatio="xMidYMid meet"
      >
        <g className="jp-JiyuChart-grid">
          {s.yTicks.map(t => (
            <g key={`y${t}`}>
              <line x1={inner.x0} x2={inner.x1} y1={s.y(t)} y2={s.y(t)} />
              <text className="jp-JiyuChart-tick" x={inner.x0 - 4} y={s.y(t) + 4} textAnchor="end">
                {tickLabel(t)}
              </text>
            </g>
          ))}
          {s.xTicks.map(t => (
            <g key={`x${t}`}>
              <line x1={s.x(t)} x2={s.x(t)} y1={inner.y0} y2={inner.y1} />
              <text className="jp-JiyuChart-tick" x={s.x(t)} y={inner.y1 + 16} textAnchor="middle">
                {tickLabel(t)}
              </text>
            </g>
          ))}
        </g>
        {shown.map(r => (
          <g
            key={r.label}
            className={`jp-JiyuChart-series${r.dimmed ? ' jp-mod-dimmed' : ''}`}
            data-label={r.label}
          >
            {!r.dashed && smoothing > 0 && (
              <path className="jp-JiyuChart-raw" d={path(r.points, s)} stroke={r.color} />
            )}
            <path
              className="jp-JiyuChart-line"
              d={path(r.dashed ? r.points : smooth(r.points, smoothing, scale), s)}
              stroke={r.color}
              strokeDasharray={r.dashed ? '5 3' : undefined}
            />
          </g>
        ))}
      </svg>
      <figcaption className="jp-JiyuChart-legend">
        {shown.map(r => (
          <span key={r.label} className={`jp-JiyuChart-key${r.dimmed ? ' jp-mod-dimmed' : ''}`}>
            <svg width="18" height="8" aria-hidden="true">
              <line
                x1="0"
                x2="18"
                y1="4"
                y2="4"
                stroke={r.color}
                strokeWidth="2"
                strokeDasharray={r.dashed ? '4 2' : undefined}
              />
            </svg>
            {r.label}
          </span>
        ))}
        <span className="jp-JiyuChart-axis">
          x: {props.options.xAxis === 'step' ? 'step' : 'wall time (s)'} · y: {scale}
        </span>
      </figcaption>
    </figure>
  );
}
