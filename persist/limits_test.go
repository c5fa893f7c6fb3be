package persist

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestLongNamesKeepTheBusConnection: a read or delete that names an object
// or a scene too long for any stored key is answered without a request to
// the bus. It fails if GET /persist/ns/sc/{6000 bytes} sends a direct get
// whose protocol line passes NATS's control-line limit (4 KiB): the server
// then closes the store's connection for good, and with it the applier,
// the sweeper and every later read, on one unauthenticated request.
func TestLongNamesKeepTheBusConnection(t *testing.T) {
	e := newEnv(t, "", true)
	e.pub(tp+"box", `{"object_id":"box","action":"create","persist":true}`)
	e.waitObject("ns", "sc", "box", nil)
	long := strings.Repeat("a", 6000)
	dotted := strings.Repeat("a.", 1500) // each '.' is escaped to three bytes in the key
	srv := httptest.NewServer(e.store.Handler(nil))
	defer srv.Close()

	tests := []struct {
		name string
		call func(ctx context.Context) error
		want error // nil: any error, or none
	}{
		{"Get long id", func(ctx context.Context) error { _, err := e.store.Get(ctx, "ns", "sc", long); return err }, ErrNotFound},
		{"Get escaped id", func(ctx context.Context) error { _, err := e.store.Get(ctx, "ns", "sc", dotted); return err }, ErrNotFound},
		{"Get long scene", func(ctx context.Context) error { _, err := e.store.Get(ctx, "ns", long, "box"); return err }, ErrNotFound},
		{"List long scene", func(ctx context.Context) error { _, err := e.store.List(ctx, long, "sc", ""); return err }, nil},
		{"DeleteScene long scene", func(ctx context.Context) error { _, err := e.store.DeleteScene(ctx, "ns", long); return err }, nil},
		{"Clone from long scene", func(ctx context.Context) error { _, err := e.store.Clone(ctx, "ns", long, "ns", "copy"); return err }, nil},
		{"Clone to long scene", func(ctx context.Context) error { _, err := e.store.Clone(ctx, "ns", "sc", "ns", long); return err }, nil},
		{"HTTP GET long id", func(ctx context.Context) error { return httpGet(srv.URL+"/persist/ns/sc/"+long, 200) }, nil},
		{"HTTP GET long scene", func(ctx context.Context) error { return httpGet(srv.URL+"/persist/ns/"+long, 400) }, nil},
		{"HTTP DELETE long scene", func(ctx context.Context) error { return httpDo("DELETE", srv.URL+"/persist/ns/"+long, 400) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := tt.call(ctx)
			if strings.HasPrefix(tt.name, "HTTP") && err != nil {
				t.Errorf("%.300v", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %.300v, want %v", err, tt.want)
			}
			if err != nil && len(err.Error()) > 600 {
				t.Errorf("error of %d bytes quotes the whole name: %.200s...", len(err.Error()), err)
			}
			if !e.nc.IsConnected() {
				t.Fatalf("the store's bus connection is %v after the call (error %.300v)", e.nc.Status(), err)
			}
			if _, err := e.get("ns", "sc", "box"); err != nil {
				t.Fatalf("the store no longer reads: %v", err)
			}
		})
	}
	// The applier still runs.
	e.pub(tp+"after", `{"object_id":"after","action":"create","persist":true}`)
	e.waitObject("ns", "sc", "after", nil)
}

func httpGet(url string, want int) error { return httpDo("GET", url, want) }

// httpDo returns an error when the answer's status is not want.
func httpDo(method, url string, want int) error {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
	if resp.StatusCode != want {
		return fmt.Errorf("status %d, want %d: %s", resp.StatusCode, want, b)
	}
	return nil
}

// TestMarkupIsStoredAtItsSize: an object whose attributes hold markup
// (an inline SVG, HTML text) is stored at about the size of its message.
// It fails if the store encodes it with encoding/json's HTML escaping,
// which writes each '<', '>' and '&' as six bytes: a create of a third of
// the limit made of markup then comes out over the store's limit, and the
// acknowledged create is rejected, never stored.
func TestMarkupIsStoredAtItsSize(t *testing.T) {
	e := newEnv(t, "", true)
	most := e.store.maxObject()
	tests := []struct{ id, text string }{
		{"svg", strings.Repeat(`<path d='M0 0'/>`, most/2/16)},
		{"brackets", strings.Repeat("<>", most/3/2)},
		{"amps", strings.Repeat("&", most/3)},
	}
	for _, tt := range tests {
		payload := `{"object_id":"` + tt.id + `","action":"create","persist":true,"data":{"src":"` + tt.text + `"}}` // nothing to escape in JSON
		if len(payload) > most {
			t.Fatalf("%s: payload of %d bytes is over the limit %d itself", tt.id, len(payload), most)
		}
		e.pub(tp+tt.id, payload)
	}
	e.barrier("ns", "sc")
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			o, err := e.get("ns", "sc", tt.id)
			if err != nil {
				t.Fatalf("create of %d bytes of markup not stored: %v", len(tt.text), err)
			}
			if o.Attributes["src"] != tt.text {
				t.Fatalf("stored text differs from the sent one")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			entry, err := e.store.kv.Get(ctx, objectKey("ns", "sc", tt.id))
			if err != nil {
				t.Fatal(err)
			}
			if n := len(entry.Value()); n > len(tt.text)+1024 {
				t.Errorf("stored as %d bytes for %d bytes of text", n, len(tt.text))
			}
		})
	}
	if got := counterValue(t, e.store.invalid); got != 0 {
		t.Errorf("%v messages rejected, want 0:\n%s", got, e.logs.String())
	}
}
