// A-Frame (bundled from npm, with its three.js) and the components the
// client adds. Text is drawn on a canvas texture so that no font has to be
// fetched from a CDN.

import AFRAME from 'aframe';

export { AFRAME };
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const THREE: any = AFRAME.THREE;

interface TextData {
  value: string;
  color: string;
  background: string;
  width: number;
  fontSize: number;
  align: string;
  side: string;
}

/**
 * xr-text: a plane showing text drawn on a canvas. width is in metres; the
 * height follows the text's aspect ratio.
 */
AFRAME.registerComponent('xr-text', {
  schema: {
    value: { type: 'string', default: '' },
    color: { type: 'color', default: '#ffffff' },
    background: { type: 'string', default: '' },
    width: { type: 'number', default: 1 },
    fontSize: { type: 'number', default: 64 },
    align: { type: 'string', default: 'center' },
    side: { type: 'string', default: 'double' },
  },
  init(this: any) {
    this.canvas = document.createElement('canvas');
    this.texture = new THREE.CanvasTexture(this.canvas);
    this.texture.colorSpace = THREE.SRGBColorSpace;
    this.material = new THREE.MeshBasicMaterial({ map: this.texture, transparent: true, side: THREE.DoubleSide });
    this.mesh = new THREE.Mesh(new THREE.PlaneGeometry(1, 1), this.material);
    this.el.setObject3D('xr-text', this.mesh);
  },
  update(this: any) {
    const d = this.data as TextData;
    const lines = String(d.value).split('\n').slice(0, 50);
    const ctx = this.canvas.getContext('2d') as CanvasRenderingContext2D;
    const px = Math.max(8, Math.min(256, d.fontSize));
    const font = `${px}px sans-serif`;
    ctx.font = font;
    const pad = px * 0.3;
    const w = Math.max(1, ...lines.map((l) => ctx.measureText(l).width)) + 2 * pad;
    const h = lines.length * px * 1.25 + 2 * pad;
    const scale = Math.min(1, 2048 / Math.max(w, h));
    this.canvas.width = Math.ceil(w * scale);
    this.canvas.height = Math.ceil(h * scale);
    ctx.setTransform(scale, 0, 0, scale, 0, 0);
    ctx.clearRect(0, 0, w, h);
    if (d.background) {
      ctx.fillStyle = d.background;
      ctx.fillRect(0, 0, w, h);
    }
    ctx.font = font;
    ctx.fillStyle = d.color;
    ctx.textBaseline = 'middle';
    ctx.textAlign = d.align === 'left' ? 'left' : d.align === 'right' ? 'right' : 'center';
    const x = d.align === 'left' ? pad : d.align === 'right' ? w - pad : w / 2;
    lines.forEach((l, i) => ctx.fillText(l, x, pad + (i + 0.5) * px * 1.25));
    this.texture.needsUpdate = true;
    this.material.side = d.side === 'front' ? THREE.FrontSide : d.side === 'back' ? THREE.BackSide : THREE.DoubleSide;
    this.mesh.scale.set(d.width, (d.width * h) / w, 1);
  },
  remove(this: any) {
    this.el.removeObject3D('xr-text');
    this.texture.dispose();
    this.material.dispose();
    this.mesh.geometry.dispose();
  },
});

/**
 * xr-smooth: moves the entity toward a target pose set by setTarget(), so
 * that avatars glide between the 10 Hz updates instead of jumping.
 */
AFRAME.registerComponent('xr-smooth', {
  schema: { halfLife: { type: 'number', default: 60 } }, // ms
  init(this: any) {
    this.pos ??= new THREE.Vector3();
    this.quat ??= new THREE.Quaternion();
    this.has ??= false;
  },
  setTarget(this: any, p: { x: number; y: number; z: number }, q: { x: number; y: number; z: number; w: number }) {
    this.pos ??= new THREE.Vector3();
    this.quat ??= new THREE.Quaternion();
    this.pos.set(p.x, p.y, p.z);
    this.quat.set(q.x, q.y, q.z, q.w).normalize();
    if (!this.has) {
      this.el.object3D.position.copy(this.pos);
      this.el.object3D.quaternion.copy(this.quat);
      this.has = true;
    }
  },
  tick(this: any, _t: number, dt: number) {
    if (!this.has || !dt) return;
    const o = this.el.object3D;
    // at the target, it stays there: slerp between (nearly) equal
    // quaternions keeps moving them by a rounding error in every frame, and
    // a page draws the frames in which something moved (ondemand.ts)
    if (o.position.equals(this.pos) && o.quaternion.equals(this.quat)) return;
    const k = 1 - Math.pow(0.5, Math.min(dt, 200) / this.data.halfLife);
    o.position.lerp(this.pos, k);
    o.quaternion.slerp(this.quat, k);
    // within a tenth of a millimetre and of a milliradian: there
    if (o.position.distanceToSquared(this.pos) < 1e-8 && o.quaternion.angleTo(this.quat) < 1e-4) {
      o.position.copy(this.pos);
      o.quaternion.copy(this.quat);
    }
  },
});

/**
 * xr-camera-pose: calls the callback on every frame with the camera's
 * world pose. The presence module throttles what it sends.
 */
AFRAME.registerComponent('xr-camera-pose', {
  init(this: any) {
    this.p = new THREE.Vector3();
    this.q = new THREE.Quaternion();
    this.onPose = null as null | ((p: unknown, q: unknown) => void);
  },
  tick(this: any) {
    if (!this.onPose) return;
    this.el.object3D.getWorldPosition(this.p);
    this.el.object3D.getWorldQuaternion(this.q);
    this.onPose(this.p, this.q);
  },
});
