package bots

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/xrealm/xrealm/volumetric"
)

// Clip is a pre-encoded point-cloud sequence that volumetric bots replay,
// so that a benchmark measures networking and not Draco: Frames[i][d] is
// description d of frame i, Draco-encoded (11-bit positions), and
// Points[d] is how many points description d holds.
type Clip struct {
	Points    int // points per frame
	FPS       float64
	DescSizes [volumetric.Descriptions]int // points per description
	Frames    [][volumetric.Descriptions][]byte
}

// MinClipFPS and MaxClipFPS bound a clip's frame rate (the SFU bench
// bounds it above the same way). A rate that is NaN, infinite or so high
// that the frame period rounds to 0 would make a bot's ticker panic (as
// would xrealm pcbot --fps NaN); so would one so low that the period
// overflows a time.Duration (a clip file at 1.4e-76 fps gives a negative
// period).
const (
	MinClipFPS = 0.001 // a frame every 1000 s
	MaxClipFPS = 1000
)

func validFPS(fps float64) bool { return fps >= MinClipFPS && fps <= MaxClipFPS }

// ClipConfig says what EncodeClip makes.
type ClipConfig struct {
	Points int     // points per frame (the paper: 100k)
	Frames int     // frames in the loop
	FPS    float64 // replay rate
	Seed   uint64
}

// EncodeClip generates the synthetic figure (volumetric.Source), splits each
// frame into the 15/25/60 % descriptions and encodes each with Draco.
func EncodeClip(ctx context.Context, cfg ClipConfig) (*Clip, error) {
	if cfg.Points < volumetric.Descriptions || cfg.Frames < 1 || !validFPS(cfg.FPS) {
		return nil, fmt.Errorf("bots: clip of %d points × %d frames at %v fps: want at least %d points, a frame, and %v to %v fps",
			cfg.Points, cfg.Frames, cfg.FPS, volumetric.Descriptions, MinClipFPS, MaxClipFPS)
	}
	d, err := volumetric.NewDraco()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	src := volumetric.NewSource(cfg.Seed, cfg.Points, cfg.FPS)
	sp, err := volumetric.NewSplitter(cfg.Seed, cfg.Points, volumetric.DefaultShares)
	if err != nil {
		return nil, err
	}
	c := &Clip{Points: cfg.Points, FPS: cfg.FPS}
	for i := 0; i < cfg.Frames; i++ {
		parts, err := sp.Split(src.Frame(uint32(i)))
		if err != nil {
			return nil, err
		}
		var f [volumetric.Descriptions][]byte
		for j, p := range parts {
			c.DescSizes[j] = len(p)
			if f[j], err = d.Encode(ctx, fmt.Sprintf("f%d-d%d", i, j), p); err != nil {
				return nil, err
			}
		}
		c.Frames = append(c.Frames, f)
	}
	return c, nil
}

// Bitrate is the clip's mean bitrate in bit/s of the given descriptions,
// payload only.
func (c *Clip) Bitrate(descs ...int) float64 {
	var n int
	for _, f := range c.Frames {
		for _, d := range descs {
			n += len(f[d])
		}
	}
	return float64(n) * 8 * c.FPS / float64(len(c.Frames))
}

// LoadClip reads a clip saved by SaveClip.
func LoadClip(path string) (*Clip, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bots: clip %s: %w", path, err)
	}
	defer f.Close()
	var c Clip
	if err := gob.NewDecoder(f).Decode(&c); err != nil {
		return nil, fmt.Errorf("bots: clip %s: %w", path, err)
	}
	if len(c.Frames) == 0 {
		return nil, fmt.Errorf("bots: clip %s is empty", path)
	}
	if !validFPS(c.FPS) {
		return nil, fmt.Errorf("bots: clip %s: %v fps, want %v to %v", path, c.FPS, MinClipFPS, MaxClipFPS)
	}
	return &c, nil
}

// SaveClip writes c to path (atomically).
func SaveClip(path string, c *Clip) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".clip-*")
	if err != nil {
		return fmt.Errorf("bots: save clip %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := gob.NewEncoder(tmp).Encode(c); err != nil {
		tmp.Close()
		return fmt.Errorf("bots: save clip %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("bots: save clip %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// CachedClip loads the clip at path, or encodes it and saves it there.
// The cache is only valid for the same cfg: put cfg in the file name.
func CachedClip(ctx context.Context, path string, cfg ClipConfig) (*Clip, error) {
	c, err := LoadClip(path)
	if err == nil && c.Points == cfg.Points && len(c.Frames) == cfg.Frames && c.FPS == cfg.FPS {
		return c, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if c, err = EncodeClip(ctx, cfg); err != nil {
		return nil, err
	}
	return c, SaveClip(path, c)
}
