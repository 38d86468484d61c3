/**
 * Compare: the runs selected in the panel on one page, their loss curves overlaid on shared
 * axes (by step or wall time, smoothed, log or linear; a resumed run joined to the steps of
 * the runs it continues, dimmed) above a table of their parameters and
 * final/best metrics with the differing parameters highlighted. Follows runs still active.
 */

import { ReactWidget, UseSignal } from '@jupyterlab/apputils';
import { Poll } from '@lumino/polling';
import { Signal } from '@lumino/signaling';
import * as React from 'react';

import { JiyuApi } from './api';
import { Comparison } from './comparebody';
import { jiyuIcon } from './icons';
import { RunFeed } from './runfeed';

export class CompareView extends ReactWidget {
  constructor(
    readonly api: JiyuApi,
    readonly runIds: string[]
  ) {
    super();
    this.id = `jiyu-compare-${runIds.join('-')}`;
    this.addClass('jp-JiyuCompare');
    this.title.label = `Compare ${runIds.length} runs`;
    this.title.caption = `Runs ${runIds.join(', ')}`;
    this.title.icon = jiyuIcon;
    this.title.closable = true;
    this.feeds = runIds.map(id => new RunFeed(api, id));
    this._poll = new Poll({
      factory: () => this._refresh(),
      frequency: { interval: 2000, backoff: true, max: 30_000 },
      standby: 'when-hidden',
      name: 'jiyu-magics:compare'
    });
  }

  readonly feeds: RunFeed[];

  render(): JSX.Element {
    return (
      <UseSignal signal={this._changed}>
        {() => {
          const loaded = this.feeds.filter(f => f.run !== null) as Array<
            RunFeed & { run: NonNullable<RunFeed['run']> }
          >;
          return (
            <Comparison
              runs={loaded.map(f => ({ run: f.run, history: f.history, ancestors: f.ancestors }))}
              error={this._error}
            />
          );
        }}
      </UseSignal>
    );
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
    super.dispose();
  }

  private async _refresh(): Promise<void> {
    try {
      await Promise.all(this.feeds.filter(f => !f.done).map(f => f.update()));
      this._error = null;
    } catch (error) {
      this._error = (error as Error).message;
      throw error;
    } finally {
      this._changed.emit();
    }
    if (this.feeds.every(f => f.done)) {
      this._poll.dispose();
    }
  }

  private _error: string | null = null;
  private _changed = new Signal<this, void>(this);
  private _poll: Poll;
}
