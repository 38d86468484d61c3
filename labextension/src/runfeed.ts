/**
 * One run as a page follows it: its record and its event log read on from the last offset,
 * folded into a history. `done` once the run has ended and its whole log is read, so a
 * finished run's page asks nothing more.
 */

import { JiyuApi } from './api';
import { emptyHistory, foldEvents, IRunHistory } from './runevents';
import { ACTIVE_STATUSES, IRun } from './types';

export class RunFeed {
  constructor(
    readonly api: JiyuApi,
    readonly runId: string
  ) {}

  run: IRun | null = null;
  history: IRunHistory = emptyHistory();
  done = false;

  /** One refresh: the record, then every event written since the last one. */
  async update(): Promise<void> {
    const run = await this.api.run(this.runId);
    for (;;) {
      const chunk = await this.api.events(this.runId, this._offset);
      foldEvents(this.history, chunk.events);
      const moved = chunk.offset !== this._offset;
      this._offset = chunk.offset;
      if (!moved || chunk.events.length === 0) {
        break;
      }
    }
    this.run = run;
    this.done = !ACTIVE_STATUSES.includes(run.status);
  }

  private _offset = 0;
}
