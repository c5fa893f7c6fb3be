// Unit tests of rendering on demand's digest (web/src/ondemand.ts) with
// real three.js objects (A-Frame's super-three): each change three would
// draw differently must change the digest, and nothing else must.
import * as THREE from 'three';
import { describe, expect, it } from 'vitest';
import { SceneDigest } from '../src/ondemand';

/** A scene with one of each kind of thing a change is made to below. */
function world() {
  const scene = new THREE.Scene();
  const camera = new THREE.PerspectiveCamera(60, 1.5, 0.1, 100);
  scene.add(camera);
  const tex = new THREE.Texture();
  const shader = new THREE.ShaderMaterial({
    uniforms: {
      time: { value: 0 }, tint: { value: new THREE.Color(1, 0, 0) }, offset: { value: new THREE.Vector3() },
      map: { value: tex }, on: { value: false }, weights: { value: [0, 0] }, xf: { value: new THREE.Matrix4() },
      points: { value: [new THREE.Vector2(), new THREE.Vector2()] },
    },
  });
  const box = new THREE.Mesh(new THREE.BoxGeometry(), shader);
  const std = new THREE.Mesh(new THREE.BoxGeometry(), new THREE.MeshStandardMaterial());
  const spot = new THREE.SpotLight(0xffffff, 1);
  const sun = new THREE.DirectionalLight(0xffffff, 1); // its target outside the graph, as three makes it
  sun.castShadow = true; // (the shadow's settings count while it casts one)
  const sky = new THREE.HemisphereLight(0xffffff, 0x000000, 1);
  const inst = new THREE.InstancedMesh(new THREE.BoxGeometry(), new THREE.MeshBasicMaterial(), 4);
  const morph = new THREE.Mesh(new THREE.BoxGeometry(), new THREE.MeshBasicMaterial());
  morph.morphTargetInfluences = [0];
  // spot lights aimed at invisible objects in the graph (A-Frame's light
  // target is an entity, often an invisible one): three moves the light
  // with the target's matrixWorld, which it updates hidden or not
  const aimed = new THREE.SpotLight(0xffffff, 1);
  const mark = new THREE.Object3D();
  mark.visible = false;
  aimed.target = mark;
  const aimedInside = new THREE.SpotLight(0xffffff, 1);
  const holder = new THREE.Group(); // hidden: what is in it is not drawn
  holder.visible = false;
  const inner = new THREE.Object3D();
  holder.add(inner);
  aimedInside.target = inner;
  // the scene's environment map, a texture of its own
  const env = new THREE.Texture();
  scene.environment = env;
  scene.add(box, std, spot, sun, sky, inst, morph, aimed, mark, aimedInside, holder);
  return { scene, camera, shader, tex, box, std, spot, sun, sky, inst, morph, mark, holder, env };
}
type World = ReturnType<typeof world>;

const changes: [string, (w: World) => void][] = [
  ['a shader uniform number set by hand', (w) => (w.shader.uniforms.time.value = 1.5)],
  ['a shader uniform colour', (w) => w.shader.uniforms.tint.value.setRGB(0, 1, 0)],
  ['a shader uniform vector', (w) => (w.shader.uniforms.offset.value.y = 2)],
  ['a shader uniform texture replaced', (w) => (w.shader.uniforms.map.value = new THREE.Texture())],
  ['a shader uniform texture updated', (w) => (w.tex.needsUpdate = true)],
  ['a shader uniform boolean', (w) => (w.shader.uniforms.on.value = true)],
  ['a shader uniform array of numbers', (w) => (w.shader.uniforms.weights.value[1] = 0.5)],
  ['a shader uniform matrix', (w) => w.shader.uniforms.xf.value.makeTranslation(1, 0, 0)],
  ['a shader uniform array of vectors', (w) => (w.shader.uniforms.points.value[1].x = 3)],
  ['a shader uniform added', (w) => (w.shader.uniforms.more = { value: 1 })],
  ['scene.environment set', (w) => (w.scene.environment = new THREE.Texture())],
  ['scene.environment updated', (w) => (w.env.needsUpdate = true)],
  ['scene.environmentIntensity', (w) => (w.scene.environmentIntensity = 0.5)],
  ['scene.backgroundIntensity', (w) => (w.scene.backgroundIntensity = 0.5)],
  ['scene.backgroundBlurriness', (w) => (w.scene.backgroundBlurriness = 0.5)],
  ['scene.overrideMaterial', (w) => (w.scene.overrideMaterial = new THREE.MeshBasicMaterial())],
  ['a spot light\'s angle', (w) => (w.spot.angle = 0.3)],
  ['a spot light\'s penumbra', (w) => (w.spot.penumbra = 0.5)],
  ['a spot light\'s distance', (w) => (w.spot.distance = 7)],
  ['a spot light\'s decay', (w) => (w.spot.decay = 1)],
  ['a light casting shadows', (w) => (w.spot.castShadow = true)],
  ['a shadow\'s bias', (w) => (w.sun.shadow.bias = -0.01)],
  ['a shadow camera\'s extent', (w) => (w.sun.shadow.camera.left = -20)],
  ['a directional light\'s target outside the graph moved', (w) => { w.sun.target.position.set(3, 0, 0); w.sun.target.updateMatrixWorld(); }],
  ['a light\'s invisible target moved', (w) => w.mark.position.set(0, 0, -4)],
  ['a light\'s target in a hidden group moved with it', (w) => w.holder.position.set(2, 0, 0)],
  ['a hemisphere light\'s ground colour', (w) => w.sky.groundColor.setRGB(0, 0, 1)],
  ['a material\'s side', (w) => (w.std.material.side = THREE.DoubleSide)],
  ['a material\'s roughness', (w) => (w.std.material.roughness = 0.1)],
  ['a material\'s metalness', (w) => (w.std.material.metalness = 0.9)],
  ['a material\'s emissive intensity', (w) => (w.std.material.emissiveIntensity = 3)],
  ['a material\'s wireframe', (w) => (w.std.material.wireframe = true)],
  ['a material\'s depth test', (w) => (w.std.material.depthTest = false)],
  ['an object receiving shadows', (w) => (w.std.receiveShadow = true)],
  ['an object\'s render order', (w) => (w.std.renderOrder = 5)],
  ['an object\'s layers', (w) => w.std.layers.set(2)],
  ['an instance moved', (w) => { w.inst.setMatrixAt(1, new THREE.Matrix4().makeTranslation(1, 0, 0)); w.inst.instanceMatrix.needsUpdate = true; }],
  ['instances drawn', (w) => (w.inst.count = 2)],
  ['a morph target\'s influence', (w) => (w.morph.morphTargetInfluences[0] = 0.5)],
];

describe('SceneDigest', () => {
  it('an unchanged scene reads unchanged, and a shadow not cast does not count', () => {
    const w = world();
    const d = new SceneDigest();
    expect(d.changed(w.scene, w.camera, 640, 400)).toBe(true);
    expect(d.changed(w.scene, w.camera, 640, 400)).toBe(false);
    w.spot.shadow.bias = -0.01;
    expect(d.changed(w.scene, w.camera, 640, 400)).toBe(false);
  });
  it('sees the renderer\'s tone mapping and exposure', () => {
    const w = world();
    const r = { toneMapping: THREE.NoToneMapping, toneMappingExposure: 1, shadowMap: { enabled: false, type: THREE.PCFShadowMap } };
    const d = new SceneDigest();
    d.changed(w.scene, w.camera, 640, 400, r);
    expect(d.changed(w.scene, w.camera, 640, 400, r)).toBe(false);
    r.toneMapping = THREE.ACESFilmicToneMapping;
    expect(d.changed(w.scene, w.camera, 640, 400, r)).toBe(true);
    r.toneMappingExposure = 2;
    expect(d.changed(w.scene, w.camera, 640, 400, r)).toBe(true);
    r.shadowMap.enabled = true;
    expect(d.changed(w.scene, w.camera, 640, 400, r)).toBe(true);
    expect(d.changed(w.scene, w.camera, 640, 400, r)).toBe(false);
  });
  for (const [what, change] of changes) {
    it(`sees ${what}`, () => {
      const w = world();
      const d = new SceneDigest();
      d.changed(w.scene, w.camera, 640, 400);
      expect(d.changed(w.scene, w.camera, 640, 400), 'before the change').toBe(false);
      change(w);
      expect(d.changed(w.scene, w.camera, 640, 400), what).toBe(true);
      expect(d.changed(w.scene, w.camera, 640, 400), 'once taken').toBe(false);
    });
  }
});
