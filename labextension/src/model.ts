/**
 * The panel's state: the latest GPU snapshot and runs, refreshed by a Lumino Poll that backs
 * off while the server is unreachable and stands by while the panel or the tab is hidden.
 */

import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { JiyuApi } from './api';
import type { GpuStatus, Run } from './api.generated';

export const MAX_BACKOFF_MS = 60_000;

export interface IPanelModelOptions {
  api: JiyuApi;
  /** Seconds between refreshes while visible. */
  interval: number;
  /** True while nobody can see the panel: the poll then waits. */
  hidden: () => boolean;
}

export class PanelModel implements IDisposable {
  constructor(options: IPanelModelOptions) {
    this.api = options.api;
    this.poll = new Poll({
      factory: () => this.refresh(),
      frequency: { interval: options.interval * 1000, backoff: true, max: MAX_BACKOFF_MS },
      standby: () => options.hidden() || 'when-hidden',
      name: 'jiyu-magics:panel'
    });
  }

  readonly api: JiyuApi;
  readonly poll: Poll;
  gpus: GpuStatus | null = null;
  runs: Run[] | null = null;
  error: string | null = null;
  /** How many finished runs the list shows below the active ones. */
  finished = 20;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  set interval(seconds: number) {
    this.poll.frequency = { ...this.poll.frequency, interval: seconds * 1000 };
  }

  /** One poll: both requests, one re-render. Rejects on failure so the poll backs off. */
  async refresh(): Promise<void> {
    try {
      const [gpus, runs] = await Promise.all([this.api.gpus(), this.api.runs()]);
      this.gpus = gpus;
      this.runs = runs;
      this.error = null;
    } catch (error) {
      this.error = error instanceof Error ? error.message : String(error);
      throw error;
    } finally {
      this._changed.emit();
    }
  }

  /** Refresh now (after a stop or a submission), not at the next tick. */
  refreshSoon(): void {
    void this.poll.refresh();
  }

  notify(): void {
    this._changed.emit();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this.poll.dispose();
    Signal.clearData(this);
  }

  private _changed = new Signal<this, void>(this);
  private _disposed = false;
}
