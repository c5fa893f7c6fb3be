// A-Frame ships no TypeScript types of its own; the client uses it through
// a small typed surface in its own code.
declare module 'aframe' {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const AFRAME: any;
  export default AFRAME;
}

// draco3d (Google Draco's WASM build) ships no types either; the decoder
// module factory takes Emscripten module options.
declare module 'draco3d/draco_decoder_nodejs.js' {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const createDecoderModule: (options?: Record<string, unknown>) => Promise<any>;
  export default createDecoderModule;
}
declare module 'draco3d/draco_encoder_nodejs.js' {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const createEncoderModule: (options?: Record<string, unknown>) => Promise<any>;
  export default createEncoderModule;
}
