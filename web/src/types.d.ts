// A-Frame ships no TypeScript types of its own; the client uses it through
// a small typed surface in its own code.
declare module 'aframe' {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const AFRAME: any;
  export default AFRAME;
}
