package ubiq

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

func collect(t *testing.T, s *Server) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		expfmt.MetricFamilyToText(&b, mf)
	}
	return b.String()
}

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }
