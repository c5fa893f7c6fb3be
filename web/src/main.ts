// Entry point: picks the page from the path.
//   /                          scene list
//   /{namespace}/{scene}       viewer
//   /{namespace}/{scene}/edit  editor
import './style.css';
import { addressTokenNotice, defaults, identityToken } from './auth';
import { showError, showNotice } from './ui';

async function main() {
  identityToken(); // takes ?token= / ?signout from the address
  const notice = addressTokenNotice();
  if (notice) showNotice(notice);
  const parts = location.pathname.split('/').filter(Boolean).map(decodeURIComponent);
  try {
    if (parts.length === 0) {
      const { startSceneList } = await import('./scenelist');
      await startSceneList();
      return;
    }
    if (parts.length === 2 || (parts.length === 3 && parts[2] === 'edit')) {
      const d = await defaults();
      const { startViewer } = await import('./viewer');
      const v = await startViewer(parts[0], parts[1], parts[2] === 'edit' ? 'edit' : 'view', d.camHeight);
      if (parts[2] === 'edit') {
        const { startEditor } = await import('./editor');
        startEditor(v);
      }
      // The SFU session carries remote point clouds, audio/video and this
      // page's own point cloud (?pointclouds=0, ?media=0 and ?pcpublish=0
      // turn them off; ?pcpublish=1 publishes at once). A page with none
      // of them does not join the SFU.
      const q = new URLSearchParams(location.search);
      const features = [];
      if (q.get('pointclouds') !== '0') features.push((await import('./pointcloudview')).pointCloudFeature(v));
      if (q.get('media') !== '0') features.push((await import('./media')).mediaFeature(v));
      const publish = q.get('pcpublish');
      if (publish === '1' || (publish !== '0' && features.length > 0)) {
        const pub = (await import('./pcpublish')).pointCloudPublishFeature();
        features.push(pub);
        if (publish === '1') pub.toggle(true);
      }
      if (features.length) {
        const { startSFUSession } = await import('./sfusession');
        (window as any).xrealm.sfu = startSFUSession(v, features);
      }
      return;
    }
    showError(`No page at ${location.pathname}. Scenes are at /namespace/scene.`, [{ label: 'Scene list', run: () => (location.href = '/') }]);
  } catch (e) {
    console.error(e);
    showError(`xrealm could not start: ${(e as Error).message}`, [{ label: 'Reload', run: () => location.reload() }]);
  }
}

main();
