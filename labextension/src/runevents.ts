/**
 * A run's event log (`GET /jiyu/api/runs/<id>/events`) folded into what its page shows: the
 * loss and validation series, the facts of its last `start`, checkpoints, errors by rank and
 * the latest numbers. Pure: the page and the comparison both use it, vitest checks it.
 * The fields are those `core/events/schema.py` declares.
 */

import { IPoint } from './chart';
import type { Event, Run, RunCheckpoint } from './api.generated';

/** A checkpoint the log recorded: where, and at which step (what resuming from it needs). */
export type RecordedCheckpoint = Pick<RunCheckpoint, 'step' | 'path'>;

export interface IRunHistory {
  /** Training loss by step and by wall-clock seconds since the first event. */
  loss: { step: IPoint[]; time: IPoint[] };
  valLoss: { step: IPoint[]; time: IPoint[] };
  valAccuracy: { step: IPoint[]; time: IPoint[] };
  /** The last `start` event's fields (amp, batch_size, device, strategy...). */
  start: Record<string, unknown>;
  checkpoints: RecordedCheckpoint[];
  errors: Array<{ rank: number | null; message: string; source: string | null }>;
  advice: string[];
  last: Record<string, number | null>;
  end: Record<string, unknown> | null;
}

export function emptyHistory(): IRunHistory {
  return {
    loss: { step: [], time: [] },
    valLoss: { step: [], time: [] },
    valAccuracy: { step: [], time: [] },
    start: {},
    checkpoints: [],
    errors: [],
    advice: [],
    last: {},
    end: null
  };
}

/** Adds events to a history (the page reads the log in chunks as it grows). */
export function foldEvents(history: IRunHistory, events: ReadonlyArray<Event>): IRunHistory {
  for (const event of events) {
    fold(history, event);
  }
  return history;
}

function fold(h: IRunHistory, e: Event): void {
  // fields by name: the kinds declare theirs, and a writer may add undeclared ones
  const fields: Record<string, unknown> = e;
  const num = (key: string) => (typeof fields[key] === 'number' ? (fields[key] as number) : null);
  const t = num('t');
  if (h.start.t0 === undefined && t !== null) {
    h.start.t0 = t;
  }
  const t0 = h.start.t0 as number | undefined;
  const add = (series: { step: IPoint[]; time: IPoint[] }, value: number | null) => {
    const step = num('step');
    if (value !== null && step !== null) {
      series.step.push({ x: step, y: value });
      if (t !== null && t0 !== undefined) {
        series.time.push({ x: t - t0, y: value });
      }
    }
  };
  if (e.kind === 'start') {
    Object.assign(h.start, e);
  } else if (e.kind === 'step') {
    add(h.loss, num('loss'));
    for (const key of [
      'step',
      'epoch',
      'loss',
      'lr',
      'samples_per_s',
      'elapsed',
      'eta',
      'mem_peak'
    ]) {
      h.last[key] = num(key);
    }
  } else if (e.kind === 'val') {
    add(h.valLoss, num('loss'));
    add(h.valAccuracy, num('accuracy'));
    h.last.val_loss = num('loss');
    h.last.val_accuracy = num('accuracy');
  } else if (e.kind === 'ckpt' && typeof e.path === 'string') {
    h.checkpoints.push({ step: num('step'), path: e.path });
  } else if (e.kind === 'error') {
    h.errors.push({
      rank: num('rank'),
      message: String(e.message ?? ''),
      source: (e.source as string) ?? null
    });
  } else if (e.kind === 'advice' && typeof e.message === 'string') {
    h.advice.push(e.message);
  } else if (e.kind === 'end') {
    h.end = e;
    // the call's samples over its wall time: a step's rate is its last window's only
    if (typeof e.samples_per_s === 'number') {
      h.last.samples_per_s = e.samples_per_s;
    }
  }
}

/** The lowest value of a series, or null. */
export function best(points: ReadonlyArray<IPoint>, lowest = true): number | null {
  const ys = points.map(p => p.y).filter(v => isFinite(v));
  if (ys.length === 0) {
    return null;
  }
  return lowest ? Math.min(...ys) : Math.max(...ys);
}

export function final(points: ReadonlyArray<IPoint>): number | null {
  return points.length ? points[points.length - 1].y : null;
}

/**
 * The command that resumes training from a checkpoint, as `jiyu show` and a stopped run's
 * message print it: the line form, which runs in a cell of its own with the notebook's objects
 * (a `%%train` cell with nothing under it is refused).
 */
export function resumeCommand(name: string, checkpoint: RecordedCheckpoint): string {
  return `%train --resume ${quote(checkpoint.path)} --name ${quote(name)}`;
}

/** The run a resumed run continues, and the step of the checkpoint it resumed from. */
export interface IParent {
  run: string;
  step: number | null;
}

/**
 * Whom a run resumed from: its last `start` event's `parent_run`/`parent_step` (the run that
 * wrote the checkpoint), else what its record's summary folded of them; null when not resumed.
 */
export function parentOf(h: IRunHistory, run?: Run | null): IParent | null {
  const recorded = typeof h.start.parent_run === 'string' && h.start.parent_run;
  const parent = recorded ? (h.start.parent_run as string) : (run?.summary.parent_run ?? null);
  if (!parent) {
    return null;
  }
  const step = recorded ? h.start.parent_step : run?.summary.parent_step;
  return { run: parent, step: typeof step === 'number' ? step : null };
}

function quote(text: string): string {
  return /^[\w./:@%+=-]+$/.test(text) ? text : `'${text.replace(/'/g, "'\\''")}'`;
}
