package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzApplyConfigFile writes the input as the --config file of a command
// whose --http-addr was given on the command line. A file is refused, or
// it is a JSON object every key of which names a flag; the flags it names
// that were not given take its values, the given one keeps the command
// line's.
func FuzzApplyConfigFile(f *testing.F) {
	for _, s := range []string{
		`{"http-addr": ":80", "insecure": true, "max-payload": 2048, "ratio": 0.5, "log-level": "debug"}`,
		`{"nats-addr": ""}`, `{"max-payload": "4096", "insecure": "1"}`, `{"max-payload": 1e20}`, `{"max-payload": 2.5}`,
		`{"insecure": null}`, `{"config": "x"}`, `{"htp-addr": ":80"}`, `{"http-addr": {"port": 80}}`,
		`{"ratio": 1, "ratio": 2}`, `[]`, `null`, ``, `{} {}`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file []byte) {
		path := filepath.Join(dir, "xrealm.json")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.String("config", "", "")
		fs.String("http-addr", ":8080", "")
		fs.String("nats-addr", ":4222", "")
		fs.String("log-level", "info", "")
		fs.Bool("insecure", false, "")
		fs.Int("max-payload", 1, "")
		fs.Float64("ratio", 1, "")
		if err := fs.Parse([]string{"--http-addr", ":81", "--config", path}); err != nil {
			t.Fatal(err)
		}
		if err := applyConfigFile(fs, path); err != nil {
			return
		}
		var m map[string]any
		// (null decodes as no settings: accepted as an empty file)
		if !json.Valid(file) || json.Unmarshal(file, &m) != nil || (m == nil && string(bytes.TrimSpace(file)) != "null") {
			t.Fatalf("accepted %q, which is not a JSON object", file)
		}
		if got := fs.Lookup("http-addr").Value.String(); got != ":81" {
			t.Fatalf("%q overrode --http-addr given on the command line: %q", file, got)
		}
		for k, v := range m {
			fl := fs.Lookup(k)
			if fl == nil || k == "config" {
				t.Fatalf("accepted %q with setting %q", file, k)
			}
			if k == "http-addr" {
				continue
			}
			got := fl.Value.String()
			switch v := v.(type) {
			case string:
				if k == "nats-addr" || k == "log-level" {
					if got != v {
						t.Fatalf("%q: %s = %q, want %q", file, k, got, v)
					}
				}
			case bool:
				if got != strconv.FormatBool(v) {
					t.Fatalf("%q: %s = %q, want %v", file, k, got, v)
				}
			case float64:
				if k != "max-payload" && k != "ratio" {
					continue // a number for a string or bool flag is read as its text
				}
				if g, err := strconv.ParseFloat(got, 64); err != nil || g != v {
					t.Fatalf("%q: %s = %q, want %v", file, k, got, v)
				}
			default:
				t.Fatalf("%q: setting %q of type %T accepted", file, k, v)
			}
		}
	})
}

// FuzzParseICEServers: --ice-servers is refused, or every server it gives
// has a stun:, stuns:, turn: or turns: URI with something after the
// scheme; the JSON form is accepted only when the whole value is JSON,
// and the list form only gives what the value spells.
func FuzzParseICEServers(f *testing.F) {
	for _, s := range []string{
		"none", "stun:a.example:3478", "stun:a.example, turn:b.example:3478?transport=udp",
		`[{"uri":"turns:t.example:5349","username":"u","password":"p"}]`, `[]`, `[{"uri":"turn:x","user":"u"}]`,
		"http://a.example", "stun:", "", ",", ` [{"uri":"stun:x"}] `, `[{"uri":"stun:x"},]`, `[null]`, `[]0`, `[{"uri":"stun:a"}] junk`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := parseICEServers(v)
		if err != nil {
			return
		}
		for _, s := range got {
			if checkICEURI(s.URI) != nil || strings.TrimSpace(s.URI) != s.URI {
				t.Fatalf("parseICEServers(%q) accepted URI %q", v, s.URI)
			}
		}
		tv := strings.TrimSpace(v)
		switch {
		case tv == "none":
			if len(got) != 0 {
				t.Fatalf("none gave %+v", got)
			}
		case strings.HasPrefix(tv, "["):
			if !json.Valid([]byte(tv)) {
				t.Fatalf("parseICEServers(%q) accepted a value that is not JSON: %+v", v, got)
			}
		default:
			if n := len(strings.Split(v, ",")); n != len(got) {
				t.Fatalf("parseICEServers(%q) = %d servers from %d fields", v, len(got), n)
			}
			for _, s := range got {
				if strings.ContainsAny(s.URI, ",") || !strings.Contains(v, s.URI) {
					t.Fatalf("parseICEServers(%q) made up URI %q", v, s.URI)
				}
			}
		}
	})
}

// FuzzParseArea: --area is refused, or gives a box with finite bounds,
// each minimum below its maximum.
func FuzzParseArea(f *testing.F) {
	for _, s := range []string{"-10,10,-10,10", " 0 , 1 , 2 , 3 ", "1,1,0,1", "0,1,0", "0,1,0,1,2", "a,b,c,d", "1e400,2e400,0,1", "0x10,0x20,-1_0,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseArea(s)
		if err != nil {
			return
		}
		for _, v := range []float64{a.MinX, a.MaxX, a.MinZ, a.MaxZ} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("parseArea(%q) = %+v, not finite", s, a)
			}
		}
		if !(a.MinX < a.MaxX && a.MinZ < a.MaxZ) {
			t.Fatalf("parseArea(%q) = %+v", s, a)
		}
	})
}

// FuzzParseUDPPorts: --udp-ports is refused, or it is MIN-MAX in decimal
// (spaces around each allowed) with 1 <= MIN <= MAX, which it gives back.
func FuzzParseUDPPorts(f *testing.F) {
	for _, s := range []string{"50000-50100", " 1 - 65535 ", "5-5", "0-10", "20-10", "-5-10", "10-70000", "50000-50100,60000", "50000-", "0x10-0x20", "+1-2", "1-2-3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, hi, err := parseUDPPorts(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("parseUDPPorts(%q): error %q does not quote the input", s, err)
			}
			return
		}
		if lo == 0 || hi < lo {
			t.Fatalf("parseUDPPorts(%q) = %d-%d", s, lo, hi)
		}
		a, b, _ := strings.Cut(s, "-")
		digits := func(s string) string { return strings.TrimLeft(strings.TrimSpace(s), "0") } // both are at least 1
		if digits(a) != strconv.Itoa(int(lo)) || digits(b) != strconv.Itoa(int(hi)) {
			t.Fatalf("parseUDPPorts(%q) = %d-%d, which is not what it says", s, lo, hi)
		}
	})
}

func TestParseUDPPortsMalformed(t *testing.T) {
	for _, s := range []string{"", "50000", "50000-", "-50100", "0-10", "20-10", "-5-10", "10-70000", "70000-80000",
		"50000-50100,60000", "50000-50100junk", "1-2-3", "a-b", "0x10-0x20", "1.5-2"} {
		if lo, hi, err := parseUDPPorts(s); err == nil {
			t.Errorf("parseUDPPorts(%q) = %d-%d, want an error", s, lo, hi)
		} else if !strings.Contains(err.Error(), "--udp-ports") || !strings.Contains(err.Error(), strconv.Quote(s)) {
			t.Errorf("parseUDPPorts(%q): error %q does not name the flag and its value", s, err)
		}
	}
	if lo, hi, err := parseUDPPorts("50000-50100"); err != nil || lo != 50000 || hi != 50100 {
		t.Errorf(`parseUDPPorts("50000-50100") = %d-%d, %v`, lo, hi, err)
	}
}

// FuzzParseInts: a bench's list of counts, "a,b,c" or "from:step:to", is
// refused with an error that names the flag, or is a non-empty list of at
// most maxRampSteps non-negative numbers: each of the list's, or from,
// from+step, ... up to to.
func FuzzParseInts(f *testing.F) {
	for _, s := range []string{"1,2,3", " 4 , ,5", "0:10:100", "5:1:5", "0:1:9223372036854775807", "-5:1:5", "5:0:10", "10:1:5", "1:2", "a,b", "-1", "-0", "+7,007", "", ",", "0:1:9999", "0:1:10000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseInts("--ramp", s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--ramp") {
				t.Fatalf("parseInts(%q): error %q does not name the flag", s, err)
			}
			return
		}
		if len(got) == 0 || len(got) > maxRampSteps {
			t.Fatalf("parseInts(%q): %d values", s, len(got))
		}
		for _, n := range got {
			if n < 0 {
				t.Fatalf("parseInts(%q) = %v: a negative count", s, got)
			}
		}
		if f := strings.Split(s, ":"); len(f) == 3 {
			from, _ := strconv.Atoi(strings.TrimSpace(f[0]))
			step, _ := strconv.Atoi(strings.TrimSpace(f[1]))
			to, _ := strconv.Atoi(strings.TrimSpace(f[2]))
			for i, n := range got {
				if n != from+i*step || n > to {
					t.Fatalf("parseInts(%q) = %v: value %d is not from + %d steps up to %d", s, got, n, i, to)
				}
			}
			if last := got[len(got)-1]; to-last >= step {
				t.Fatalf("parseInts(%q) = %v: stops short of %d", s, got, to)
			}
			return
		}
		want := splitList(s)
		if len(want) != len(got) {
			t.Fatalf("parseInts(%q) = %v, from %d fields", s, got, len(want))
		}
		for i, x := range want {
			if n, err := strconv.Atoi(x); err != nil || got[i] != n {
				t.Fatalf("parseInts(%q) = %v: field %q read as %d", s, got, x, got[i])
			}
		}
	})
}
