/**
 * One run as a page follows it: its record and its event log read on from the last offset,
 * folded into a history. `done` once the run has ended and its whole log is read, so a
 * finished run's page asks nothing more. Its checkpoints as they are on disk are asked again
 * whenever the log records a new one (`--keep-ckpts` removes old ones as new ones come) and
 * once more as the run ends. A resumed run's lineage (the runs it continues, with their
 * histories) is read once its parent is known (lineage.ts).
 */

import { JiyuApi } from './api';
import { IAncestor, readLineage } from './lineage';
import { emptyHistory, foldEvents, IRunHistory, parentOf } from './runevents';
import type { RankRecord, Run, RunCheckpoints } from './api.generated';
import { ACTIVE_STATUSES } from './statuses';

export class RunFeed {
  constructor(
    readonly api: JiyuApi,
    readonly runId: string
  ) {}

  run: Run | null = null;
  history: IRunHistory = emptyHistory();
  /** Each rank's own record, where its ranks write one (jobs and --nproc runs). */
  ranks: RankRecord[] = [];
  /** What exists on disk; null until the server answered. */
  checkpoints: RunCheckpoints | null = null;
  /** The runs it resumed from, parent first (empty when it was not resumed). */
  ancestors: IAncestor[] = [];
  done = false;

  /**
   * One refresh: the record, then every event written since the last one. Reads on while the
   * offset moves: a chunk of lines that are not events (skipped by the server) moves it with
   * no events, and stopping there would mark a finished run done before its end was read.
   */
  async update(): Promise<void> {
    const run = await this.api.run(this.runId);
    for (;;) {
      const chunk = await this.api.events(this.runId, this._offset);
      foldEvents(this.history, chunk.events);
      const moved = chunk.offset > this._offset;
      this._offset = Math.max(this._offset, chunk.offset);
      if (!moved) {
        break;
      }
    }
    this.ranks = run.kind === 'kernel' ? [] : await this.api.ranks(this.runId);
    const done = !ACTIVE_STATUSES.includes(run.status);
    const recorded = this.history.checkpoints.length;
    if (recorded !== this._checkpointsSeen || done) {
      this.checkpoints = await this.api.checkpoints(this.runId);
      this._checkpointsSeen = recorded;
    }
    const parent = parentOf(this.history, run);
    if (parent && parent.run !== this._lineageOf) {
      this._lineageOf = parent.run;
      this.ancestors = await readLineage(this.api, parent);
    }
    this.run = run;
    this.done = done;
  }

  private _offset = 0;
  private _checkpointsSeen = -1;
  /** The parent whose lineage was read. */
  private _lineageOf: string | null = null;
}
