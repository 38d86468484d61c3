import { LabIcon } from '@jupyterlab/ui-components';

/** A GPU chip holding a falling loss: the panel's tab, the log views, the submit button. */
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path fill-rule="evenodd" d="M5 5h14v14H5zM7 7v10h10V7z"/>
    <path d="M8 2h2v3H8zM11 2h2v3h-2zM14 2h2v3h-2zM8 19h2v3H8zM11 19h2v3h-2zM14 19h2v3h-2z"/>
    <path d="M2 8h3v2H2zM2 11h3v2H2zM2 14h3v2H2zM19 8h3v2h-3zM19 11h3v2h-3zM19 14h3v2h-3z"/>
    <path d="M8.5 8.5h2v7h-2zM11 11h2v4.5h-2zM13.5 13h2v2.5h-2z"/>
  </g>
</svg>`;

export const jiyuIcon = new LabIcon({ name: 'jiyu-magics:chip', svgstr: svg });
