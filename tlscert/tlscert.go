// Package tlscert provides the TLS certificate xrealm serves: one given by
// the operator, or a self-signed one generated into the data directory on
// first start.
package tlscert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Load returns a TLS configuration with the certificate in certFile and
// keyFile. When both are empty it uses dataDir/tls/cert.pem and key.pem,
// creating a self-signed certificate for hosts (plus localhost, 127.0.0.1
// and ::1) if they do not exist. A self-signed certificate made there
// before is made again when it has expired or does not name one of hosts
// (the server was started by another name since); certificates it did not
// make, and files it cannot read as one, are left as they are.
func Load(certFile, keyFile, dataDir string, hosts []string) (*tls.Config, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("tls: give both --tls-cert and --tls-key, or neither (a self-signed certificate is then made in the data directory)")
	}
	if certFile == "" {
		dir := filepath.Join(dataDir, "tls")
		certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		if err := finishRenewal(certFile, keyFile); err != nil {
			return nil, err
		}
		if renew(certFile, hosts, time.Now()) {
			if err := generate(dir, certFile, keyFile, hosts); err != nil {
				return nil, err
			}
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load %s and %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// renew reports whether the self-signed certificate in certFile must be
// made (again): there is none, or it is one of generate's that has
// expired or does not name every one of hosts.
func renew(certFile string, hosts []string, now time.Time) bool {
	b, err := os.ReadFile(certFile)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false // LoadX509KeyPair says why
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return false
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || c.Subject.CommonName != selfSignedName || !c.IsCA {
		return false
	}
	if !now.Before(c.NotAfter) {
		return true
	}
	for _, h := range hosts {
		if h != "" && c.VerifyHostname(h) != nil {
			return true
		}
	}
	return false
}

// selfSignedName is the common name of the certificates generate makes.
const selfSignedName = "xrealm self-signed"

func generate(dir, certFile, keyFile string, hosts []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("tls: generate key: %w", err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: selfSignedName, Organization: []string{"xrealm"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(5, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range append([]string{"localhost", "127.0.0.1", "::1"}, hosts...) {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("tls: create certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	// Each file is written whole under a temporary name and renamed to
	// its .next name, the key first; then both are renamed into place, the
	// key first. A renewal stopped half way leaves no truncated file, and
	// never a key and a certificate that do not belong together:
	// finishRenewal completes it at the next start.
	if err := writeFile(keyFile+nextSuffix, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return fmt.Errorf("tls: write key: %w", err)
	}
	if err := writeFile(certFile+nextSuffix, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("tls: write certificate: %w", err)
	}
	return finishRenewal(certFile, keyFile)
}

// nextSuffix names the files of a renewal not yet in place.
const nextSuffix = ".next"

// finishRenewal puts the files of a renewal (certFile and keyFile with
// nextSuffix) in place, the key first. The certificate's .next file is
// written after the key's, so without it the renewal was cut short before
// it had both, and a lone key's .next is removed; with it, the key is
// either still beside it or already in place.
func finishRenewal(certFile, keyFile string) error {
	certNext, keyNext := certFile+nextSuffix, keyFile+nextSuffix
	if _, err := os.Stat(certNext); errors.Is(err, os.ErrNotExist) {
		if err := os.Remove(keyNext); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("tls: remove an unfinished renewal's key: %w", err)
		}
		return nil
	} else if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	if err := os.Rename(keyNext, keyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tls: put the renewed key in place: %w", err)
	}
	if err := os.Rename(certNext, certFile); err != nil {
		return fmt.Errorf("tls: put the renewed certificate in place: %w", err)
	}
	return nil
}

// writeFile writes b to name through a temporary file in its directory.
func writeFile(name string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), filepath.Base(name)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	return os.Rename(f.Name(), name)
}
