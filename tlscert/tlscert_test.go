package tlscert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSelfSignedIsKept(t *testing.T) {
	dir := t.TempDir()
	a, err := Load("", "", dir, []string{"xr.example"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load("", "", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(a.Certificates[0].Certificate[0])
	cb, _ := x509.ParseCertificate(b.Certificates[0].Certificate[0])
	if !ca.Equal(cb) {
		t.Fatal("second Load generated a new certificate")
	}
	if err := ca.VerifyHostname("localhost"); err != nil {
		t.Fatal(err)
	}
	if err := ca.VerifyHostname("xr.example"); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("cert.pem", "", dir, nil); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
}

// TestLoadMalformed: certificate and key files that are empty, not PEM, or
// do not belong together are refused with an error naming both files, and
// the files are left as they were (a self-signed pair is not regenerated
// over a damaged one).
func TestLoadMalformed(t *testing.T) {
	good := t.TempDir()
	if _, err := Load("", "", good, nil); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if _, err := Load("", "", other, nil); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cert, key := read(filepath.Join(good, "tls", "cert.pem")), read(filepath.Join(good, "tls", "key.pem"))
	otherKey := read(filepath.Join(other, "tls", "key.pem"))
	for _, tt := range []struct {
		name      string
		cert, key []byte
	}{
		{"empty certificate", nil, key},
		{"empty key", cert, nil},
		{"not PEM", []byte("not a certificate"), key},
		{"truncated certificate", cert[:len(cert)/2], key},
		{"truncated key", cert, key[:len(key)/2]},
		{"key and certificate swapped", key, cert},
		{"another certificate's key", cert, otherKey},
		{"binary garbage", []byte{0x30, 0x82, 0xff, 0xff, 0}, []byte{0xff}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Given as files, and damaged in a data directory.
			dir := t.TempDir()
			cf, kf := filepath.Join(dir, "tls", "cert.pem"), filepath.Join(dir, "tls", "key.pem")
			if err := os.MkdirAll(filepath.Dir(cf), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cf, tt.cert, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(kf, tt.key, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, given := range []bool{true, false} {
				var err error
				if given {
					_, err = Load(cf, kf, "", nil)
				} else {
					_, err = Load("", "", dir, nil)
				}
				if err == nil {
					t.Fatalf("given %v: accepted", given)
				}
				if !strings.Contains(err.Error(), cf) || !strings.Contains(err.Error(), kf) {
					t.Errorf("given %v: error %q does not name both files", given, err)
				}
			}
			if !bytes.Equal(read(cf), tt.cert) || !bytes.Equal(read(kf), tt.key) {
				t.Fatal("the files changed")
			}
		})
	}
}

// The self-signed certificate in the data directory is made again when it
// does not name a host the server is started for (a --public-host added
// after the first start: kept, naming localhost only, it would make
// clients reaching the server by its name refuse it) or when it has
// expired.
// A certificate that names every host asked for is kept, and so is a
// certificate in the data directory that this package did not make.
func TestSelfSignedRenewed(t *testing.T) {
	parse := func(t *testing.T, dir string) *x509.Certificate {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "tls", "cert.pem"))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatal("no PEM block")
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// writeCert puts a certificate named cn, valid until notAfter for
	// localhost, into dir.
	writeCert := func(t *testing.T, dir, cn string, notAfter time.Time) {
		t.Helper()
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn},
			NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter, DNSNames: []string{"localhost"},
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			BasicConstraintsValid: true, IsCA: true}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "tls"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tls", "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tls", "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string) // the data directory before Load
		hosts   []string
		renewed bool
	}{
		{"a host added", func(t *testing.T, dir string) {
			if _, err := Load("", "", dir, []string{"localhost"}); err != nil {
				t.Fatal(err)
			}
		}, []string{"xr.example"}, true},
		{"an address added", func(t *testing.T, dir string) {
			if _, err := Load("", "", dir, nil); err != nil {
				t.Fatal(err)
			}
		}, []string{"192.0.2.7"}, true},
		{"every host named", func(t *testing.T, dir string) {
			if _, err := Load("", "", dir, []string{"xr.example", "192.0.2.7"}); err != nil {
				t.Fatal(err)
			}
		}, []string{"192.0.2.7", "", "xr.example", "localhost"}, false},
		{"expired", func(t *testing.T, dir string) {
			writeCert(t, dir, selfSignedName, time.Now().Add(-time.Hour))
		}, nil, true},
		{"not made here, expired and naming another host", func(t *testing.T, dir string) {
			writeCert(t, dir, "operator's own", time.Now().Add(-time.Hour))
		}, []string{"xr.example"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.prepare(t, dir)
			before := parse(t, dir)
			conf, err := Load("", "", dir, tc.hosts)
			if err != nil {
				t.Fatal(err)
			}
			after := parse(t, dir)
			served, err := x509.ParseCertificate(conf.Certificates[0].Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if !served.Equal(after) {
				t.Fatal("Load serves another certificate than the one in the data directory")
			}
			if renewed := !before.Equal(after); renewed != tc.renewed {
				t.Fatalf("certificate renewed: %v, want %v", renewed, tc.renewed)
			}
			if tc.renewed {
				for _, h := range append([]string{"localhost"}, tc.hosts...) {
					if err := after.VerifyHostname(h); err != nil {
						t.Errorf("renewed certificate: %v", err)
					}
				}
				if !time.Now().Before(after.NotAfter) {
					t.Errorf("renewed certificate expired at %s", after.NotAfter)
				}
			}
		})
	}
}

// TestRenewalCutShort: a renewal stopped between its files (a crash, a
// power cut) is completed, or undone, at the next start. It fails if a
// start after the key was renamed into place, but not the certificate,
// keeps a pair that does not belong together: the node then refuses to
// start until someone removes the files.
func TestRenewalCutShort(t *testing.T) {
	for _, tt := range []struct {
		name string
		cut  func(t *testing.T, certFile, keyFile string) // leaves the files as a cut renewal would
	}{
		{"both .next files written", func(*testing.T, string, string) {}},
		{"key in place, certificate not", func(t *testing.T, _, keyFile string) {
			if err := os.Rename(keyFile+nextSuffix, keyFile); err != nil {
				t.Fatal(err)
			}
		}},
		{"key's .next alone", func(t *testing.T, certFile, _ string) {
			if err := os.Remove(certFile + nextSuffix); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Load("", "", dir, nil); err != nil {
				t.Fatal(err)
			}
			tlsDir := filepath.Join(dir, "tls")
			certFile, keyFile := filepath.Join(tlsDir, "cert.pem"), filepath.Join(tlsDir, "key.pem")
			// a renewal for another host, made in a copy and moved in
			// as its .next files, as generate leaves them before its
			// renames
			other := t.TempDir()
			if err := generate(other, filepath.Join(other, "cert.pem"), filepath.Join(other, "key.pem"), []string{"xr.example"}); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"cert.pem", "key.pem"} {
				if err := os.Rename(filepath.Join(other, f), filepath.Join(tlsDir, f+nextSuffix)); err != nil {
					t.Fatal(err)
				}
			}
			tt.cut(t, certFile, keyFile)
			c, err := Load("", "", dir, nil)
			if err != nil {
				t.Fatalf("start after a renewal cut short: %v", err)
			}
			for _, f := range []string{certFile, keyFile} {
				if _, err := os.Stat(f + nextSuffix); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s%s left behind: %v", f, nextSuffix, err)
				}
			}
			leaf, _ := x509.ParseCertificate(c.Certificates[0].Certificate[0])
			t.Logf("serving a certificate for %v", leaf.DNSNames)
		})
	}
}
