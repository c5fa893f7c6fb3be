// Rendering on demand: A-Frame draws the scene in every animation frame,
// also when nothing on it changed, which on a page left open (and above all
// with software WebGL) costs a core for nothing. The scene still ticks every
// frame (animations, walking, smoothing, the pose sent by presence), but the
// draw is skipped while what would be drawn is the same as in the last
// frame drawn: the canvas keeps showing that frame.
//
// What is compared, after the tick, is a digest of the scene graph: every
// visible object's id, transform and visibility, shadow flags, render order,
// layers, morph influences and instances, its geometry (identity, attribute
// versions, draw range), its materials (version, colour, opacity, textures'
// versions: a loaded image, a canvas text or a new video frame bumps them;
// the values three reads at each draw: side, depth test, roughness and the
// like, and a ShaderMaterial's uniforms, also set by hand), lights (colour,
// intensity, range, cone, ground colour, shadow settings, a target outside
// the graph or hidden), the camera's projection, the canvas size, the scene's
// background, environment, fog and override material, and the renderer's
// tone mapping and shadow switch. What it still cannot see (a uniform
// added in onBeforeCompile, say) is drawn within IDLE_DRAW_MS, when a
// frame is drawn anyway. In WebXR every frame is drawn.

/** The longest time between two frames drawn, even when nothing seems to change. */
export const IDLE_DRAW_MS = 500;

export interface FrameStats {
  /** Frames of the render loop drawn and skipped since the page started. */
  drawn: number;
  skipped: number;
}

const TEXTURE_SLOTS = ['map', 'alphaMap', 'emissiveMap', 'envMap', 'normalMap', 'roughnessMap', 'metalnessMap', 'aoMap', 'lightMap', 'bumpMap', 'displacementMap', 'specularMap'];
/**
 * Material fields three reads at each draw (no version bump when set):
 * numbers and booleans, missing ones counted as -1.
 */
const MATERIAL_VALUES = ['side', 'transparent', 'alphaTest', 'depthTest', 'depthWrite', 'colorWrite', 'blending', 'wireframe',
  'emissiveIntensity', 'roughness', 'metalness', 'envMapIntensity', 'size', 'linewidth', 'shininess', 'reflectivity',
  'aoMapIntensity', 'lightMapIntensity', 'bumpScale', 'displacementScale', 'displacementBias', 'alphaHash', 'flatShading'];
/** Light fields besides colour and intensity; missing ones counted as -1. */
const LIGHT_VALUES = ['distance', 'decay', 'angle', 'penumbra', 'width', 'height', 'castShadow'];
/** A uniform's array elements digested at most (a big array costs its length, not its elements, beyond). */
const MAX_UNIFORM_ARRAY = 64;

/**
 * What the renderer would draw (see above), as a list of numbers: equal
 * lists draw the same frame.
 */
export class SceneDigest {
  private cur: number[] = [];
  /** The scene whose digest is being taken. */
  private root: any = null;
  private prev: number[] = [];

  private add(x: number) {
    this.cur.push(x);
  }

  private color(c: any) {
    if (c && typeof c.r === 'number') {
      this.add(c.r);
      this.add(c.g);
      this.add(c.b);
    } else this.add(c?.id ?? (c ? 1 : 0)); // a texture (its version below) or nothing
    if (c?.isTexture) this.add(c.version);
  }

  /** A number, a boolean or nothing (-1); anything else counts as 1. */
  private value(v: any) {
    this.add(typeof v === 'number' ? v : v === true ? 1 : v === false ? 0 : v == null ? -1 : 1);
  }

  /** A shader uniform's value: a number, colour, vector, matrix, texture, or an array of them. */
  private uniform(v: any, depth = 0) {
    if (v == null || typeof v !== 'object') return this.value(v);
    if (v.isTexture) {
      this.add(v.id);
      this.add(v.version);
    } else if (v.isColor) {
      this.add(v.r); this.add(v.g); this.add(v.b);
    } else if (v.isMatrix3 || v.isMatrix4 || ArrayBuffer.isView(v) || Array.isArray(v)) {
      const a = v.elements ?? v;
      this.add(a.length);
      const n = Math.min(a.length, MAX_UNIFORM_ARRAY);
      for (let i = 0; i < n; i++) if (depth < 2) this.uniform(a[i], depth + 1);
    } else if (typeof v.x === 'number') {
      this.add(v.x); this.add(v.y); this.value(v.z); this.value(v.w);
    } else this.add(1);
  }

  private material(m: any) {
    if (!m) return;
    this.add(m.id);
    this.add(m.version);
    this.add(m.visible ? 1 : 0);
    this.add(m.opacity);
    this.color(m.color);
    this.color(m.emissive);
    for (const s of TEXTURE_SLOTS) {
      const t = m[s];
      if (t) {
        this.add(t.id);
        this.add(t.version);
      }
    }
    for (const k of MATERIAL_VALUES) this.value(m[k]);
    const u = m.uniforms;
    if (u) {
      for (const k in u) this.uniform(u[k]?.value);
      this.add(Object.keys(u).length);
    }
  }

  private light(o: any) {
    this.color(o.color);
    this.add(o.intensity);
    for (const k of LIGHT_VALUES) this.value(o[k]);
    if (o.groundColor) this.color(o.groundColor);
    const t = o.target;
    if (t) {
      this.add(t.id);
      // Reached by the walk (visible, in the scene), it is digested as any
      // object. In the graph but hidden (itself or a parent: the walk does
      // not go there), three still updates its matrixWorld and aims the
      // light with it: that is digested, updated as three would. Outside
      // the graph, three uses its matrixWorld as set.
      if (!this.walked(t)) {
        if (t.parent != null) t.updateWorldMatrix(true, false);
        for (const e of t.matrixWorld.elements) this.add(e);
      }
    }
    const sh = o.castShadow ? o.shadow : null;
    if (sh) {
      this.add(sh.bias);
      this.add(sh.normalBias);
      this.add(sh.radius);
      this.add(sh.mapSize.x);
      this.add(sh.mapSize.y);
      const c = sh.camera;
      if (c) for (const k of ['near', 'far', 'left', 'right', 'top', 'bottom', 'fov']) this.value(c[k]);
    }
  }

  /** Whether the walk from the scene digests o: it and its parents up to the scene are visible. */
  private walked(o: any): boolean {
    for (let x = o; x; x = x.parent) {
      if (!x.visible) return false;
      if (x === this.root) return true;
    }
    return false;
  }

  private object(o: any) {
    this.add(o.id);
    this.add(o.visible ? 1 : 0);
    if (!o.visible) return; // three draws nothing of it
    const p = o.position, q = o.quaternion, s = o.scale;
    this.add(p.x); this.add(p.y); this.add(p.z);
    this.add(q.x); this.add(q.y); this.add(q.z); this.add(q.w);
    this.add(s.x); this.add(s.y); this.add(s.z);
    if (!o.matrixAutoUpdate) for (const e of o.matrix.elements) this.add(e);
    this.add(o.castShadow ? 1 : 0);
    this.add(o.receiveShadow ? 1 : 0);
    this.add(o.renderOrder);
    this.add(o.layers.mask);
    if (o.morphTargetInfluences) for (const x of o.morphTargetInfluences) this.add(x);
    if (o.isInstancedMesh) {
      this.add(o.count);
      this.add(o.instanceMatrix.version);
      this.add(o.instanceColor?.version ?? -1);
    }
    const g = o.geometry;
    if (g) {
      this.add(g.id);
      for (const k in g.attributes) this.add(g.attributes[k].version);
      if (g.index) this.add(g.index.version);
      this.add(g.drawRange.start);
      this.add(g.drawRange.count);
    }
    if (Array.isArray(o.material)) o.material.forEach((m: any) => this.material(m));
    else this.material(o.material);
    if (o.isLight) this.light(o);
    if (o.isCamera) {
      this.add(o.fov ?? 0);
      this.add(o.aspect ?? 0);
      this.add(o.zoom ?? 1);
      this.add(o.near);
      this.add(o.far);
    }
    this.add(o.children.length);
    for (const c of o.children) this.object(c);
  }

  /**
   * Takes the digest of scene (a THREE.Scene) seen through camera on a
   * canvas of width by height, drawn by renderer (a THREE.WebGLRenderer,
   * or none), and says whether it differs from the one taken before.
   */
  changed(scene: any, camera: any, width: number, height: number, renderer?: any): boolean {
    [this.prev, this.cur] = [this.cur, this.prev];
    this.cur.length = 0;
    this.root = scene;
    this.add(width);
    this.add(height);
    if (renderer) {
      this.value(renderer.toneMapping);
      this.value(renderer.toneMappingExposure);
      this.value(renderer.shadowMap?.enabled);
      this.value(renderer.shadowMap?.type);
    }
    this.color(scene.background);
    this.value(scene.backgroundIntensity);
    this.value(scene.backgroundBlurriness);
    this.color(scene.environment);
    this.value(scene.environmentIntensity);
    for (const r of [scene.backgroundRotation, scene.environmentRotation]) if (r) { this.add(r.x); this.add(r.y); this.add(r.z); }
    if (scene.overrideMaterial) this.material(scene.overrideMaterial);
    else this.add(-1);
    if (scene.fog) {
      this.color(scene.fog.color);
      this.add(scene.fog.near ?? scene.fog.density);
      this.add(scene.fog.far ?? 0);
    }
    this.object(scene);
    // the camera may be outside the scene graph
    if (camera && camera.parent == null) this.object(camera);
    const a = this.cur, b = this.prev;
    if (a.length !== b.length) return true;
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i] && !(a[i] !== a[i] && b[i] !== b[i])) return true; // (NaN equals NaN)
    return false;
  }
}

/**
 * Makes the scene's render loop skip the draw of frames that would show
 * nothing new, drawing one at least every idleDrawMs. Draws outside the
 * loop (a test reading pixels) are not touched. Returns the counts of
 * frames drawn and skipped.
 */
export function renderOnDemand(sceneEl: any, idleDrawMs = IDLE_DRAW_MS): FrameStats {
  const stats: FrameStats = { drawn: 0, skipped: 0 };
  const install = () => {
    const renderer = sceneEl.renderer;
    const draw = renderer.render.bind(renderer);
    const digest = new SceneDigest();
    let inLoop = false;
    let lastAt = -Infinity;
    renderer.render = (scene: any, camera: any) => {
      if (!inLoop || renderer.xr?.isPresenting) return draw(scene, camera);
      const now = performance.now();
      const changed = digest.changed(scene, camera, renderer.domElement.width, renderer.domElement.height, renderer);
      if (!changed && now - lastAt < idleDrawMs) {
        stats.skipped++;
        return;
      }
      lastAt = now;
      stats.drawn++;
      draw(scene, camera);
      // The next frame compares with the scene as drawn: three changes
      // some of it while drawing (it bumps the version of a transparent
      // double-sided material, such as a name tag's, twice per draw).
      digest.changed(scene, camera, renderer.domElement.width, renderer.domElement.height, renderer);
    };
    renderer.setAnimationLoop((time: number, frame: unknown) => {
      inLoop = true;
      try {
        sceneEl.render(time, frame);
      } finally {
        inLoop = false;
      }
    });
  };
  if (sceneEl.renderStarted) install();
  else sceneEl.addEventListener('renderstart', install, { once: true });
  return stats;
}
