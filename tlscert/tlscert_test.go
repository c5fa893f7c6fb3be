package tlscert

import (
	"crypto/x509"
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
