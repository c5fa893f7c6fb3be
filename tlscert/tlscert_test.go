package tlscert

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
