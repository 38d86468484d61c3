import { defineConfig } from 'vitest/config';

// Unit tests of the pure model and rendering code (test/); the browser test in the Python
// suite (tests/test_lab_panel.py) covers the panel inside a real JupyterLab.
export default defineConfig({
  esbuild: { jsx: 'transform' },
  test: { include: ['test/**/*.test.{ts,tsx}'], environment: 'node' }
});
