//go:build !unix

package server

import "os"

// DataLockFile is the file in the data directory that a running server
// holds an exclusive lock on (on Unix systems only).
const DataLockFile = "xrealm.lock"

// lockDataDir does not lock the data directory on this system: nothing
// stops two servers from sharing one, which loses data. Give each its own.
func lockDataDir(dir string) (*os.File, error) { return nil, nil }

// noLockError is never returned here (lockDataDir takes no lock at all).
type noLockError struct{ error }
