/**
 * A resumed run's lineage: the runs it continues (`--resume` from a checkpoint another run
 * wrote: its start event's `parent_run`/`parent_step`), each with its history up to the step
 * its child resumed from, so the run page and Compare draw one joined curve (the parents'
 * steps dimmed before the run's own) and the page links back to each. Parents have usually
 * ended, so a chain is read once. No JupyterLab imports: vitest checks it.
 */

import type { ISeries } from './chart';
import type { JiyuApi } from './api';
import { emptyHistory, foldEvents, IParent, IRunHistory, parentOf } from './runevents';
import type { Run } from './api.generated';

/** How many generations of `--resume` are followed back. */
export const MAX_ANCESTORS = 4;

/** A run that a later one continues: its history, drawn up to the step its child resumed from. */
export interface IAncestor {
  run: Run;
  history: IRunHistory;
  /** The step of the checkpoint its child resumed from (null: not recorded, all of it). */
  until: number | null;
}

/**
 * The runs `parent` and its own parents, parent first; a run that cannot be read (deleted)
 * or one already seen (a loop of hand-copied checkpoints) ends the chain there.
 */
export async function readLineage(api: JiyuApi, parent: IParent | null): Promise<IAncestor[]> {
  const chain: IAncestor[] = [];
  const seen = new Set<string>();
  while (parent && chain.length < MAX_ANCESTORS && !seen.has(parent.run)) {
    seen.add(parent.run);
    let run: Run;
    const past = emptyHistory();
    try {
      run = await api.run(parent.run);
      for (let offset = 0; ;) {
        const chunk = await api.events(parent.run, offset);
        foldEvents(past, chunk.events);
        if (chunk.offset <= offset) {
          break;
        }
        offset = chunk.offset;
      }
    } catch {
      break;
    }
    chain.push({ run, history: past, until: parent.step });
    parent = parentOf(past, run);
  }
  return chain;
}

/** An ancestor's training loss by step up to where its child resumed. */
export function stepsUntilResumed(ancestor: IAncestor): ISeries['points'] {
  const until = ancestor.until;
  return ancestor.history.loss.step.filter(p => until === null || p.x <= until);
}

/**
 * The dimmed series that join a run's curve to its lineage's, oldest first, in the run's
 * colour; only by step (each run's wall clock starts at its own first event).
 */
export function ancestorSeries(
  ancestors: ReadonlyArray<IAncestor>,
  color: string,
  label: (ancestor: IAncestor) => string
): ISeries[] {
  return [...ancestors].reverse().map(a => ({
    label: label(a),
    points: stepsUntilResumed(a),
    color,
    dimmed: true
  }));
}
