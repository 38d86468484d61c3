import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';

import { RunRow } from '../src/components';
import { StacksBody, stallText } from '../src/stall';
import { run } from './records';
import type { Run } from '../src/api.generated';

const noop = (_: Run) => undefined;
/** A frame of the user's code with no notebook cell (a run without a line map). */
const USER_FRAME = { kind: 'user' as const, cell: null, source: null };

describe('stalled runs', () => {
  it('says how long the step stood still, as jiyu jobs does', () => {
    expect([42, 12 * 60 + 5, 2 * 3600 + 300].map(s => stallText(0, s))).toEqual([
      'no step for 42 s',
      'no step for 12 min',
      'no step for 2 h 5 min'
    ]);
  });

  it('shows the chip and the Stacks button only beside running with a stall', () => {
    const since = Date.now() / 1000 - 12 * 60 - 3;
    const stalled = renderToStaticMarkup(
      <RunRow
        run={run({ status: 'running', stalled_since: since })}
        onStop={noop}
        onLogs={noop}
        onStacks={noop}
      />
    );
    expect(stalled).toContain('jp-JiyuChip jp-mod-running');
    expect(stalled).toContain('jp-JiyuChip jp-mod-stalled');
    expect(stalled).toContain('no step for 12 min');
    expect(stalled).toContain('>Stacks</button>');
    // the chip sits under the head, not beside the name it used to squeeze to nothing
    const head = stalled.slice(
      stalled.indexOf('jp-JiyuRun-head'),
      stalled.indexOf('jp-JiyuProgress')
    );
    expect(head.indexOf('jp-JiyuRun-kind')).toBeLessThan(head.indexOf('jp-mod-stalled'));
    expect(head.slice(0, head.indexOf('jp-JiyuRun-kind'))).not.toContain('jp-mod-stalled');
    const moving = renderToStaticMarkup(
      <RunRow run={run({ status: 'running' })} onStop={noop} onLogs={noop} onStacks={noop} />
    );
    expect(moving).not.toContain('jp-mod-stalled');
    expect(moving).not.toContain('>Stacks</button>');
    const ended = renderToStaticMarkup(
      <RunRow
        run={run({ status: 'stopped', stalled_since: since })}
        onStop={noop}
        onLogs={noop}
        onStacks={noop}
      />
    );
    expect(ended).not.toContain('no step for');
  });

  it('lists each group of ranks with its headline and frames, innermost last', () => {
    const html = renderToStaticMarkup(
      <StacksBody
        dump={{
          run_id: 'abc',
          dumped: '20261201T020000',
          groups: [
            {
              ranks: [1],
              headline: 'rank 1 is in train_step (job.py:17)',
              frames: [
                { file: '/r/job.py', line: 17, func: 'train_step', ...USER_FRAME },
                { file: '/r/job.py', line: 40, func: '<module>', ...USER_FRAME }
              ],
              text: '',
              native: false,
              hosts: {},
              stopped: null
            }
          ]
        }}
      />
    );
    expect(html).toContain('rank 1 is in train_step (job.py:17)');
    expect(html).toContain(
      'File &quot;/r/job.py&quot;, line 40 in &lt;module&gt;\n  File &quot;/r/job.py&quot;, line 17 in train_step'
    );
  });

  it("folds the frames that carry the user's code to the rank, as jiyu stacks does", () => {
    const plumbing = Array.from({ length: 20 }, (_, i) => ({
      file: '/venv/site-packages/IPython/core/interactiveshell.py',
      line: 100 + i,
      func: `run_code_${i}`,
      kind: 'jiyu' as const,
      cell: null,
      source: null
    }));
    const html = renderToStaticMarkup(
      <StacksBody
        dump={{
          run_id: 'abc',
          dumped: '20261201T020000',
          groups: [
            {
              ranks: [0, 1],
              headline: 'ranks 0, 1 are in train_step (cell 2, line 9)',
              // innermost first, as the server sends them
              frames: [
                {
                  file: '/venv/torch/distributed/c10d.py',
                  line: 5,
                  func: 'all_reduce',
                  kind: 'library',
                  cell: null,
                  source: null
                },
                {
                  file: '/r/job.py',
                  line: 17,
                  func: 'train_step',
                  kind: 'user',
                  cell: 'cell 2, line 9',
                  source: 'dist.all_reduce(t)'
                },
                ...plumbing
              ],
              text: '',
              native: false,
              hosts: {},
              stopped: null
            }
          ]
        }}
      />
    );
    const shown = html.slice(0, html.indexOf('jp-JiyuStacks-folded'));
    expect(shown).toContain('your code (outermost first):');
    expect(shown).toContain('cell 2, line 9, in train_step\n      dist.all_reduce(t)');
    expect(shown).toContain('then, in libraries (innermost last):');
    expect(shown).toContain('File &quot;…/distributed/c10d.py&quot;, line 5 in all_reduce');
    expect(html).toContain('/venv/torch/distributed/c10d.py'); // whole, in the folded stack
    expect(shown.indexOf('train_step')).toBeLessThan(shown.indexOf('all_reduce'));
    expect(shown).not.toContain('run_code_');
    expect(html).toContain('20 frames of jiyu, IPython, runpy and torchrun folded');
    expect(html).toContain('run_code_19'); // a click away, in the folded details
  });
});
