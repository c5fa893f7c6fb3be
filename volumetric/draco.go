package volumetric

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// PositionBits is the Draco position quantisation used by the paper.
const PositionBits = 11

// ErrNoDraco reports that Google Draco's command line tools are missing.
// scripts/setup-sfu.sh installs them (Debian package draco).
var ErrNoDraco = errors.New("volumetric: draco_encoder/draco_decoder not found (install Debian package draco: scripts/setup-sfu.sh)")

// Draco encodes and decodes point clouds with Google Draco through its
// reference tools draco_encoder and draco_decoder (Debian package draco,
// built from the same sources as libdraco). Using the tools keeps the
// module free of cgo; the bots pre-encode frames, so the per-call process
// start is paid before a benchmark, not during it.
type Draco struct {
	encoder, decoder string
	// Bits is the position quantisation; 0 means PositionBits.
	Bits int
	// Level is the compression level 0..10; 0 means 7 (Draco's default).
	Level int
	dir   string
}

// NewDraco finds the tools and makes a scratch directory; Close removes it.
func NewDraco() (*Draco, error) {
	enc, err1 := exec.LookPath("draco_encoder")
	dec, err2 := exec.LookPath("draco_decoder")
	if err1 != nil || err2 != nil {
		return nil, ErrNoDraco
	}
	dir, err := os.MkdirTemp("", "xrealm-draco-")
	if err != nil {
		return nil, fmt.Errorf("volumetric: draco scratch dir: %w", err)
	}
	return &Draco{encoder: enc, decoder: dec, dir: dir}, nil
}

// Close removes the scratch directory.
func (d *Draco) Close() error { return os.RemoveAll(d.dir) }

// Encode compresses c into a Draco bitstream. name must be unique among
// concurrent calls on d (for example "c3-f17-d1").
func (d *Draco) Encode(ctx context.Context, name string, c Cloud) ([]byte, error) {
	if len(c) == 0 {
		return nil, fmt.Errorf("volumetric: encode %s: empty cloud", name)
	}
	in := filepath.Join(d.dir, name+".ply")
	out := filepath.Join(d.dir, name+".drc")
	defer os.Remove(in)
	defer os.Remove(out)
	if err := os.WriteFile(in, EncodePLY(c), 0o600); err != nil {
		return nil, fmt.Errorf("volumetric: encode %s: %w", name, err)
	}
	bits, level := d.Bits, d.Level
	if bits == 0 {
		bits = PositionBits
	}
	if level == 0 {
		level = 7
	}
	cmd := exec.CommandContext(ctx, d.encoder, "-point_cloud", "-qp", strconv.Itoa(bits), "-cl", strconv.Itoa(level), "-i", in, "-o", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("volumetric: draco_encoder %s: %v: %s", name, err, bytes.TrimSpace(msg))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("volumetric: encode %s: %w", name, err)
	}
	return b, nil
}

// Decode decompresses a Draco bitstream.
func (d *Draco) Decode(ctx context.Context, name string, drc []byte) (Cloud, error) {
	in := filepath.Join(d.dir, name+".in.drc")
	out := filepath.Join(d.dir, name+".out.ply")
	defer os.Remove(in)
	defer os.Remove(out)
	if err := os.WriteFile(in, drc, 0o600); err != nil {
		return nil, fmt.Errorf("volumetric: decode %s: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, d.decoder, "-i", in, "-o", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("volumetric: draco_decoder %s: %v: %s", name, err, bytes.TrimSpace(msg))
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, fmt.Errorf("volumetric: decode %s: %w", name, err)
	}
	defer f.Close()
	c, err := DecodePLY(f)
	if err != nil {
		return nil, fmt.Errorf("volumetric: decode %s: %w", name, err)
	}
	return c, nil
}

// EncodePLY writes c as a binary little-endian PLY point cloud with float
// positions and uchar colours.
func EncodePLY(c Cloud) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "ply\nformat binary_little_endian 1.0\nelement vertex %d\n"+
		"property float x\nproperty float y\nproperty float z\n"+
		"property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n", len(c))
	rec := make([]byte, 15)
	for _, p := range c {
		binary.LittleEndian.PutUint32(rec[0:], math.Float32bits(p.X))
		binary.LittleEndian.PutUint32(rec[4:], math.Float32bits(p.Y))
		binary.LittleEndian.PutUint32(rec[8:], math.Float32bits(p.Z))
		rec[12], rec[13], rec[14] = p.R, p.G, p.B
		b.Write(rec)
	}
	return b.Bytes()
}

// MaxPLYPoints bounds the vertex count DecodePLY accepts.
const MaxPLYPoints = 1 << 24

// DecodePLY reads a PLY point cloud (ASCII or binary little-endian) with
// float or double x, y, z and optional uchar red, green, blue. Other vertex
// properties are skipped; other elements must follow the vertices.
func DecodePLY(r io.Reader) (Cloud, error) {
	br := bufio.NewReader(r)
	type prop struct {
		name string
		size int
		kind string
	}
	var (
		props   []prop
		n       = -1
		format  string
		inVerts bool
	)
	sizes := map[string]int{"char": 1, "uchar": 1, "int8": 1, "uint8": 1, "short": 2, "ushort": 2, "int16": 2, "uint16": 2,
		"int": 4, "uint": 4, "int32": 4, "uint32": 4, "float": 4, "float32": 4, "double": 8, "float64": 8}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("ply header: %w", err)
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "format":
			if len(f) > 1 {
				format = f[1]
			}
		case "element":
			inVerts = len(f) == 3 && f[1] == "vertex"
			if inVerts {
				if n, err = strconv.Atoi(f[2]); err != nil || n < 0 {
					return nil, fmt.Errorf("ply header: bad vertex count %q", f[2])
				}
			}
		case "property":
			if inVerts {
				if len(f) != 3 || sizes[f[1]] == 0 {
					return nil, fmt.Errorf("ply header: unsupported vertex property %q", strings.TrimSpace(line))
				}
				props = append(props, prop{name: f[2], size: sizes[f[1]], kind: f[1]})
			}
		}
		if f[0] == "end_header" {
			break
		}
	}
	if n < 0 {
		return nil, errors.New("ply header: no vertex element")
	}
	if n > MaxPLYPoints {
		return nil, fmt.Errorf("ply header: %d vertices, more than %d", n, MaxPLYPoints)
	}
	if !slices.ContainsFunc(props, func(p prop) bool { return p.name == "x" }) ||
		!slices.ContainsFunc(props, func(p prop) bool { return p.name == "y" }) ||
		!slices.ContainsFunc(props, func(p prop) bool { return p.name == "z" }) {
		return nil, errors.New("ply header: the vertex element needs properties x, y and z")
	}
	// Grown as points arrive: the count is the file's word, not its size.
	out := make(Cloud, 0, min(n, 1<<16))
	set := func(p *Point, name string, v float64) {
		switch name {
		case "x":
			p.X = float32(v)
		case "y":
			p.Y = float32(v)
		case "z":
			p.Z = float32(v)
		case "red":
			p.R = uint8(v)
		case "green":
			p.G = uint8(v)
		case "blue":
			p.B = uint8(v)
		}
	}
	switch format {
	case "ascii":
		for i := 0; i < n; i++ {
			line, err := br.ReadString('\n')
			if err != nil && line == "" {
				return nil, fmt.Errorf("ply vertex %d: %w", i, err)
			}
			out = append(out, Point{})
			f := strings.Fields(line)
			if len(f) < len(props) {
				return nil, fmt.Errorf("ply vertex %d: %d values, want %d", i, len(f), len(props))
			}
			for k, p := range props {
				v, err := strconv.ParseFloat(f[k], 64)
				if err != nil {
					return nil, fmt.Errorf("ply vertex %d: %w", i, err)
				}
				set(&out[len(out)-1], p.name, v)
			}
		}
	case "binary_little_endian":
		stride := 0
		for _, p := range props {
			stride += p.size
		}
		rec := make([]byte, stride)
		for i := 0; i < n; i++ {
			if _, err := io.ReadFull(br, rec); err != nil {
				return nil, fmt.Errorf("ply vertex %d: %w", i, err)
			}
			out = append(out, Point{})
			off := 0
			for _, p := range props {
				b := rec[off : off+p.size]
				off += p.size
				var v float64
				switch p.kind {
				case "float", "float32":
					v = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
				case "double", "float64":
					v = math.Float64frombits(binary.LittleEndian.Uint64(b))
				case "uchar", "uint8":
					v = float64(b[0])
				case "char", "int8":
					v = float64(int8(b[0]))
				case "ushort", "uint16":
					v = float64(binary.LittleEndian.Uint16(b))
				case "short", "int16":
					v = float64(int16(binary.LittleEndian.Uint16(b)))
				case "uint", "uint32":
					v = float64(binary.LittleEndian.Uint32(b))
				default:
					v = float64(int32(binary.LittleEndian.Uint32(b)))
				}
				set(&out[len(out)-1], p.name, v)
			}
		}
	default:
		return nil, fmt.Errorf("ply: unsupported format %q", format)
	}
	return out, nil
}
