import { defineConfig } from 'vitest/config';

// The client is served by `xrealm serve` at /, /{ns}/{scene} and
// /{ns}/{scene}/edit, so assets must be addressed from the root.
export default defineConfig({
  base: '/',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: true,
    chunkSizeWarningLimit: 4000,
  },
  server: {
    // `npm run dev` against a local `xrealm serve` on :8080.
    proxy: {
      '/persist': 'http://localhost:8080',
      '/conf': 'http://localhost:8080',
      '/user': 'http://localhost:8080',
      '/scenes': 'http://localhost:8080',
      '/sfu/ws': { target: 'ws://localhost:8080', ws: true },
      '/mqtt': { target: 'ws://localhost:8080', ws: true },
    },
  },
  // The point-cloud worker imports the Draco decoder on demand: ES module workers.
  worker: { format: 'es' },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    fileParallelism: false,
  },
});
