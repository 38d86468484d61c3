import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';

import { GpuSection } from '../src/components';
import { describeRun } from '../src/view';
import { GIB, run, snapshot } from './records';
import type { GpuKernel, GpuStatus } from '../src/api.generated';

const KERNEL: GpuKernel = {
  kernel_id: '5371d62e-0195-4337-bf39-088596736078',
  session_id: 's1',
  notebook: 'experiments/alpha.ipynb',
  execution_state: 'idle',
  idle_s: 2400,
  run_id: null,
  memory: 6 * GIB,
  gpus: [1],
  idle_warning: true
};

function shared(): GpuStatus {
  const snap = snapshot({ kernels: [KERNEL] });
  const [gpu0, gpu1] = snap.devices;
  gpu0.free = false;
  gpu0.leases = [
    {
      uuid: 'GPU-1111',
      index: 0,
      run_id: 'a1b2c3d4',
      since: 0,
      ended: null,
      shared: false,
      run_name: 'digits',
      run_kind: 'job',
      notebook: '/work/train.ipynb',
      reported_memory: 3 * GIB,
      user: null,
      mine: true
    }
  ];
  gpu0.processes = [
    {
      pid: 4242,
      used_memory: null,
      command: null,
      type: 'compute',
      mine: false,
      owner: {
        kind: 'outside',
        label: 'pid outside this container',
        run_id: null,
        run_name: null,
        run_kind: null,
        notebook: null,
        kernel_id: null,
        session_id: null,
        execution_state: null,
        idle_s: null,
        user: null
      }
    }
  ];
  gpu1.free = false;
  gpu1.foreign_memory = 6 * GIB;
  gpu1.processes = [
    {
      pid: 77,
      used_memory: 6 * GIB,
      command: 'python -m ipykernel_launcher',
      type: 'compute',
      mine: false,
      owner: {
        kind: 'kernel',
        label: 'kernel 5371d62e · alpha.ipynb',
        run_id: null,
        run_name: null,
        run_kind: null,
        notebook: KERNEL.notebook,
        kernel_id: KERNEL.kernel_id,
        session_id: 's1',
        execution_state: 'idle',
        idle_s: 2400,
        user: null
      }
    }
  ];
  return snap;
}

describe('GPU owners', () => {
  it('shows the lease of a GPU with run, id, kind, notebook and what the run reports', () => {
    const html = renderToStaticMarkup(<GpuSection snapshot={shared()} />);
    expect(html).toMatch(
      /Leased by run digits \(a1b2c3d4, job\) · train\.ipynb since \d\d:\d\d · reports 3\.0 GiB/
    );
    expect(html).toContain('pid outside this container');
  });

  it('names the notebook of a kernel holding memory, with its idle time, a warning and Shut down', () => {
    const html = renderToStaticMarkup(<GpuSection snapshot={shared()} />);
    expect(html).toContain('kernel 5371d62e · alpha.ipynb');
    expect(html).toContain('idle 40:00');
    expect(html).toContain('jp-JiyuProc jp-mod-kernel jp-mod-warn');
    expect(html).toContain('aria-label="Shut down kernel of alpha.ipynb"');
    expect(html).toContain('alpha.ipynb holds 6.0 GiB on GPU 1 and has been idle 40:00.');
    expect(html).toContain('Busy: 6.0 GiB held outside jiyu');
  });

  it('says free for an unleased GPU without foreign memory, and warns of nothing then', () => {
    const html = renderToStaticMarkup(<GpuSection snapshot={snapshot()} />);
    expect(html.match(/jp-JiyuGpu-holder jp-mod-free/g)).toHaveLength(2);
    expect(html).not.toContain('jp-JiyuPanel-warning');
  });
});

describe('queued and running runs', () => {
  it('show the queue position and what a queued run waits for', () => {
    const v = describeRun(run({ status: 'queued', queue_position: 2, gpus_requested: 2 }));
    expect(v.statusLabel).toBe('queued #2');
    expect(v.gpuText).toBe('waits for 2 GPUs');
  });

  it('show the GPU indices a running run holds', () => {
    const lease = { uuid: 'u', run_id: 'a1b2c3d4', since: 1, ended: null, shared: false };
    const v = describeRun(
      run({
        gpus: [
          { ...lease, index: 3 },
          { ...lease, index: 1 }
        ]
      })
    );
    expect(v.statusLabel).toBe('running');
    expect(v.gpuText).toBe('GPU 1, 3');
  });
});
