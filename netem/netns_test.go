package netem

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInNamespacePanicReturns checks that a panic in the function run in a
// namespace, recovered by the caller, leaves the caller's thread in the
// namespace it was in.
func TestInNamespacePanicReturns(t *testing.T) {
	requireRoot(t)
	name := fmt.Sprintf("xrealm-test-panic-%d", os.Getpid())
	if err := addNamespace(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteNamespace(name) })

	runtime.LockOSThread() // the same thread before and after
	defer runtime.UnlockOSThread()
	before := threadNetns(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic in fn did not reach the caller")
			}
		}()
		_ = InNamespace(name, func() error {
			if threadNetns(t) == before {
				t.Error("fn did not run in the namespace")
			}
			panic("in the namespace")
		})
	}()
	if after := threadNetns(t); after != before {
		t.Errorf("after a recovered panic the thread is in namespace %s, want %s (where it was)", after, before)
	}
}

func threadNetns(t *testing.T) string {
	t.Helper()
	link, err := os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		t.Fatal(err)
	}
	return link
}
