import { LabIcon } from '@jupyterlab/ui-components';

/**
 * A graphics card (bracket, fan, heat-sink fins, edge connector): the panel's tab, the log
 * views and the submit button. Distinct from JupyterLab's chip-shaped kernel icon.
 */
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M1 4h2v16H1z"/>
    <path fill-rule="evenodd" d="M4 6h19v11H4zM5.5 7.5v8h16v-8z"/>
    <path fill-rule="evenodd" d="M10 8.5a3 3 0 1 1 0 6a3 3 0 1 1 0-6zM10 10.5a1 1 0 1 0 0 2a1 1 0 1 0 0-2z"/>
    <path d="M14.5 9h1.2v5h-1.2zM16.8 9H18v5h-1.2zM19.1 9h1.2v5h-1.2z"/>
    <path d="M7 17h11v2.5H7z"/>
  </g>
</svg>`;

export const jiyuIcon = new LabIcon({ name: 'jiyu-magics:gpu', svgstr: svg });
