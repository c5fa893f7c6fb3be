// three (A-Frame's super-three) ships no types; the unit tests use it untyped.
declare module 'three' {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const THREE: any;
  export = THREE;
}
