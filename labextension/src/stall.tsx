/**
 * A stalled run in the panel: a warning chip beside `running` ("no step for 12 min": its step
 * has not moved for its stall timeout while its ranks live) and the Stacks button's view of
 * every rank's stack, grouped by identical stacks (GET /jiyu/api/runs/{id}/stacks, as
 * `jiyu stacks ID` prints it). Plain React, no JupyterLab imports: unit-testable.
 */

import * as React from 'react';

import { shortPaths } from './view';
import type { Run, StackDump, StackFrame, StackGroup } from './api.generated';

/** `no step for 12 min`, as `%jobs` and `jiyu jobs` say it (views/run_table.stall_text). */
export function stallText(since: number, now: number): string {
  const seconds = Math.max(0, Math.floor(now - since));
  if (seconds < 60) {
    return `no step for ${seconds} s`;
  }
  if (seconds < 3600) {
    return `no step for ${Math.floor(seconds / 60)} min`;
  }
  return `no step for ${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}

export function isStalled(run: Run): boolean {
  return run.status === 'running' && run.stalled_since !== null;
}

export function StallChip(props: { run: Run; now?: number }): JSX.Element | null {
  const run = props.run;
  if (!isStalled(run)) {
    return null;
  }
  const text = stallText(run.stalled_since as number, props.now ?? Date.now() / 1000);
  return (
    <span
      className="jp-JiyuChip jp-mod-stalled"
      role="status"
      title={`Stalled: ${text}. Every rank's stack was dumped (Stacks, or jiyu stacks ${run.id}).`}
    >
      {text}
    </span>
  );
}

export function StacksBody(props: { dump: StackDump }): JSX.Element {
  const { dump } = props;
  if (dump.groups.length === 0) {
    return <p>Run {dump.run_id} has no stack dump (one is taken when it stalls).</p>;
  }
  return (
    <div className="jp-JiyuStacks" aria-label={`Stacks of run ${dump.run_id}`}>
      <p className="jp-JiyuStacks-when">Dumped {dump.dumped}</p>
      <ul className="jp-JiyuStacks-headlines">
        {dump.groups.map(g => (
          <li key={g.ranks.join(',')}>{g.headline}</li>
        ))}
      </ul>
      {dump.groups.map(g => (
        <details key={g.ranks.join(',')} className="jp-JiyuStacks-group" open>
          <summary>
            {g.ranks.length === 1 ? 'rank' : 'ranks'} {g.ranks.join(', ')}
          </summary>
          <GroupFrames group={g} />
        </details>
      ))}
    </div>
  );
}

/**
 * A group's stack as `jiyu stacks` prints it: the user's frames first (outermost first, by
 * notebook cell where the run's line map says), then the libraries' (innermost last); the
 * frames of jiyu, IPython, runpy and torchrun that only carry the user's code to the rank
 * folded, a click away.
 */
function GroupFrames(props: { group: StackGroup }): JSX.Element {
  const g = props.group;
  if (g.stopped) {
    return (
      <p className="jp-JiyuStacks-stopped">
        stopped: it dumps its stack once continued (kill -CONT PID); Stop ends it
      </p>
    );
  }
  const outerFirst = g.frames.slice().reverse();
  const user = outerFirst.filter(f => f.kind === 'user');
  const library = outerFirst.filter(f => f.kind === 'library');
  const folded = outerFirst.filter(f => f.kind === 'jiyu');
  return (
    <>
      {user.length > 0 && (
        <>
          <p className="jp-JiyuStacks-part">your code (outermost first):</p>
          <pre className="jp-JiyuStacks-frames">{user.map(f => frameText(f, true)).join('\n')}</pre>
        </>
      )}
      {library.length > 0 && (
        <>
          <p className="jp-JiyuStacks-part">then, in libraries (innermost last):</p>
          <pre className="jp-JiyuStacks-frames">
            {library.map(f => frameText(f, true)).join('\n')}
          </pre>
        </>
      )}
      {folded.length > 0 && (
        <details className="jp-JiyuStacks-folded">
          <summary>
            {folded.length} frame{folded.length === 1 ? '' : 's'} of jiyu, IPython, runpy and
            torchrun folded
          </summary>
          <pre className="jp-JiyuStacks-frames">
            {outerFirst.map(f => frameText(f, false)).join('\n')}
          </pre>
        </details>
      )}
    </>
  );
}

/** A frame's line; `short`: its file cut to the last two parts (the whole stack, folded, has them whole). */
function frameText(f: StackFrame, short: boolean): string {
  if (f.cell) {
    return `  ${f.cell}, in ${f.func}\n      ${f.source ?? ''}`;
  }
  return `  File "${short ? shortPaths(f.file) : f.file}", line ${f.line} in ${f.func}`;
}
