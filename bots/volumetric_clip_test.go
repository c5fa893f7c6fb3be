package bots

import (
	"bytes"
	"context"
	"encoding/gob"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/volumetric"
)

func gobClip(t testing.TB, c *Clip) []byte {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(c); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func oneFrameClip(fps float64) *Clip {
	return &Clip{Points: 3, FPS: fps, DescSizes: [volumetric.Descriptions]int{1, 1, 1},
		Frames: [][volumetric.Descriptions][]byte{{[]byte("a"), []byte("b"), []byte("c")}}}
}

// TestLoadClipMalformed: a clip file that is not a clip, is empty, or
// has a frame rate a bot cannot tick at is an error naming the file.
func TestLoadClipMalformed(t *testing.T) {
	good := gobClip(t, oneFrameClip(15))
	for _, tt := range []struct {
		name string
		file []byte
	}{
		{"empty file", nil},
		{"not gob", []byte("not a clip\n")},
		{"truncated", good[:len(good)/2]},
		{"no frames", gobClip(t, &Clip{Points: 3, FPS: 15})},
		{"zero fps", gobClip(t, oneFrameClip(0))},
		{"negative fps", gobClip(t, oneFrameClip(-1))},
		{"NaN fps", gobClip(t, oneFrameClip(math.NaN()))},
		{"infinite fps", gobClip(t, oneFrameClip(math.Inf(1)))},
		{"fps beyond the bound", gobClip(t, oneFrameClip(2e9))},
		// A frame period of 1/fps s overflows a time.Duration to a
		// negative one (found by FuzzLoadClip).
		{"fps so low the period overflows", gobClip(t, oneFrameClip(1.3817869688151111e-76))},
		{"fps below the bound", gobClip(t, oneFrameClip(MinClipFPS/2))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "clip.gob")
			if err := os.WriteFile(path, tt.file, 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadClip(path)
			if err == nil {
				t.Fatalf("accepted a clip of %d frames at %v fps", len(c.Frames), c.FPS)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "clip.gob")
	if err := SaveClip(path, oneFrameClip(15)); err != nil {
		t.Fatal(err)
	}
	if c, err := LoadClip(path); err != nil || c.FPS != 15 || len(c.Frames) != 1 || string(c.Frames[0][2]) != "c" {
		t.Fatalf("LoadClip of a saved clip = %+v, %v", c, err)
	}
}

// TestEncodeClipRefusesBadConfig: a clip's frame rate must be one a bot can
// tick at; the error says what is wanted.
func TestEncodeClipRefusesBadConfig(t *testing.T) {
	for _, cfg := range []ClipConfig{
		{Points: 100, Frames: 1, FPS: math.NaN()},
		{Points: 100, Frames: 1, FPS: math.Inf(1)},
		{Points: 100, Frames: 1, FPS: 2e9},
		{Points: 100, Frames: 1, FPS: 0},
		{Points: 100, Frames: 1, FPS: 1e-76},
		{Points: 100, Frames: 0, FPS: 15},
		{Points: 1, Frames: 1, FPS: 15},
	} {
		if _, err := EncodeClip(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "want") {
			t.Errorf("EncodeClip(%+v): %v, want an error saying what is wanted", cfg, err)
		}
	}
}

// FuzzLoadClip: any file is refused with an error naming it, or is a clip
// with frames at a rate a bot can tick at, that saves and loads back the
// same.
func FuzzLoadClip(f *testing.F) {
	f.Add(gobClip(f, oneFrameClip(15)))
	f.Add(gobClip(f, oneFrameClip(math.NaN())))
	f.Add(gobClip(f, &Clip{Points: 3, FPS: 15}))
	f.Add([]byte("not a clip"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file []byte) {
		path := filepath.Join(dir, "clip.gob")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadClip(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if len(c.Frames) == 0 || !(c.FPS > 0 && c.FPS <= MaxClipFPS) {
			t.Fatalf("accepted a clip of %d frames at %v fps", len(c.Frames), c.FPS)
		}
		if p := time.Duration(float64(time.Second) / c.FPS); p <= 0 {
			t.Fatalf("accepted %v fps, a frame period of %v", c.FPS, p)
		}
		again := filepath.Join(dir, "again.gob")
		if err := SaveClip(again, c); err != nil {
			t.Fatal(err)
		}
		c2, err := LoadClip(again)
		if err != nil || !reflect.DeepEqual(normalClip(c), normalClip(c2)) {
			t.Fatalf("saved and loaded back: %+v, %v; was %+v", c2, err, c)
		}
	})
}

// normalClip makes empty and nil descriptions alike (gob does not tell
// them apart).
func normalClip(c *Clip) *Clip {
	n := *c
	n.Frames = nil
	for _, f := range c.Frames {
		for d := range f {
			if len(f[d]) == 0 {
				f[d] = nil
			}
		}
		n.Frames = append(n.Frames, f)
	}
	return &n
}
