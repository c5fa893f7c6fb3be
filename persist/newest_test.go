package persist

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// TestNewestReadsAgree: the two ways of reading a key's newest message,
// the stream leader's message get (replicated buckets) and the KV's direct
// get (a bucket with one replica), give the same answer, whatever state
// the key is in: its revision, whether it is deleted, its value.
func TestNewestReadsAgree(t *testing.T) {
	s := fuzzStore(t)
	if !s.single.Load() {
		t.Fatal("a store on one node with one replica does not read its keys with direct gets")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := objectKey("ns", "sc", "k")
	for _, tt := range []struct {
		name   string
		change func() error
		want   *kvMsg
	}{
		{"never written", func() error { return nil }, nil},
		{"created", func() error { _, err := s.kv.Put(ctx, key, []byte(`{"v":1}`)); return err }, &kvMsg{data: []byte(`{"v":1}`)}},
		{"updated", func() error { _, err := s.kv.Put(ctx, key, []byte(`{"v":2}`)); return err }, &kvMsg{data: []byte(`{"v":2}`)}},
		{"deleted", func() error { return s.kv.Delete(ctx, key) }, &kvMsg{deleted: true}},
		{"created again", func() error { _, err := s.kv.Put(ctx, key, []byte(`{"v":3}`)); return err }, &kvMsg{data: []byte(`{"v":3}`)}},
		{"purged", func() error { return s.kv.Purge(ctx, key) }, &kvMsg{deleted: true}},
	} {
		if err := tt.change(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		s.single.Store(false)
		leader, err := s.newest(ctx, key)
		if err != nil {
			t.Fatalf("%s: the leader's get: %v", tt.name, err)
		}
		s.single.Store(true)
		direct, err := s.newest(ctx, key)
		if err != nil {
			t.Fatalf("%s: the direct get: %v", tt.name, err)
		}
		if !reflect.DeepEqual(leader, direct) {
			t.Errorf("%s: the leader's get %+v, the direct get %+v", tt.name, leader, direct)
		}
		if tt.want == nil {
			if leader != nil {
				t.Errorf("%s: %+v, want nothing", tt.name, leader)
			}
			continue
		}
		if leader == nil || leader.deleted != tt.want.deleted || string(leader.data) != string(tt.want.data) || leader.seq == 0 {
			t.Errorf("%s: %+v, want %+v with a revision", tt.name, leader, tt.want)
		}
	}
}
