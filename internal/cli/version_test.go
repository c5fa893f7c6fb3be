package cli

import "testing"

func TestBuildVersion(t *testing.T) {
	tests := []struct {
		v      buildVersion
		commit string
		line   string
	}{
		{buildVersion{Go: "go1.26.8"}, "unknown", "xrealm, commit unknown (built without a VCS stamp: go build -buildvcs=auto in a git checkout adds one), go1.26.8"},
		{buildVersion{Revision: "b759a56fdb1a0c4e2f0e0d3c2b1a09f8e7d6c5b4", Time: "2026-11-24T06:18:52Z", Go: "go1.26.8"}, "b759a56fdb1a", "xrealm b759a56fdb1a (committed 2026-11-24T06:18:52Z), go1.26.8"},
		{buildVersion{Revision: "b759a56fdb1a0c4e", Time: "2026-11-24T06:18:52Z", Modified: true, Go: "go1.26.8"}, "b759a56fdb1a-modified", "xrealm b759a56fdb1a-modified (committed 2026-11-24T06:18:52Z), go1.26.8"},
		{buildVersion{Revision: "abc"}, "abc", "xrealm abc (committed ), "},
	}
	for _, tc := range tests {
		if got := tc.v.commit(); got != tc.commit {
			t.Errorf("%+v: commit %q, want %q", tc.v, got, tc.commit)
		}
		if got := tc.v.String(); got != tc.line {
			t.Errorf("%+v: %q, want %q", tc.v, got, tc.line)
		}
	}
	// A test binary is built without a VCS stamp.
	if v := readVersion(); v.Go == "" {
		t.Errorf("readVersion() = %+v: no Go version", v)
	}
}
