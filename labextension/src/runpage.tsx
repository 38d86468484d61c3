/**
 * A run's page in the main area: the loss chart with validation as its own series, the
 * latest numbers, parameters and options, processes, checkpoints with the command that
 * resumes from each, a resumed run's lineage (links to the runs it continues, their steps
 * joined dimmed to its curve), the log, and Stop. It follows the run through the REST API while it is
 * active (so it survives a reload: the layout restorer reopens it by run id) and stops asking
 * once the run has ended and everything is read.
 */

import { ReactWidget, UseSignal } from '@jupyterlab/apputils';
import { Poll } from '@lumino/polling';
import { Signal } from '@lumino/signaling';
import { Panel } from '@lumino/widgets';
import * as React from 'react';

import { JiyuApi } from './api';
import { jiyuIcon } from './icons';
import { LogView } from './logview';
import { RunPageBody } from './runpagebody';
import { RunFeed } from './runfeed';
import type { Run } from './api.generated';

export class RunPage extends Panel {
  constructor(
    readonly api: JiyuApi,
    readonly runId: string,
    readonly runName: string,
    onStop: (run: Run) => void,
    onOpen?: (runId: string, name: string) => void
  ) {
    super();
    this.id = `jiyu-run-${runId}`;
    this.addClass('jp-JiyuRunPage');
    this.title.label = `Run: ${runName}`;
    this.title.caption = `Run ${runName} (${runId})`;
    this.title.icon = jiyuIcon;
    this.title.closable = true;
    this.feed = new RunFeed(api, runId);
    const changed = this._changed;
    const feed = this.feed;
    this.addWidget(
      ReactWidget.create(
        <UseSignal signal={changed}>
          {() => <RunPageBody feed={feed} error={this._error} onStop={onStop} onOpen={onOpen} />}
        </UseSignal>
      )
    );
    this.addWidget(new LogView(api, runId, runName));
    this._poll = new Poll({
      factory: () => this._refresh(),
      frequency: { interval: 1000, backoff: true, max: 30_000 },
      standby: 'when-hidden',
      name: `jiyu-magics:run-${runId}`
    });
  }

  readonly feed: RunFeed;

  /** Refresh now (after a stop), not at the next tick. */
  refreshSoon(): void {
    void this._poll.refresh();
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
    super.dispose();
  }

  private async _refresh(): Promise<void> {
    try {
      await this.feed.update();
      this._error = null;
    } catch (error) {
      this._error = (error as Error).message;
      throw error;
    } finally {
      this._changed.emit();
    }
    if (this.feed.done) {
      this._poll.dispose();
    }
  }

  private _error: string | null = null;
  private _changed = new Signal<this, void>(this);
  private _poll: Poll;
}
