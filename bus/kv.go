package bus

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// IsRevisionConflict reports whether err is a conditional key-value write
// or delete (Create, Update, or Delete with LastRevision) that lost to
// another writer: the key exists already, or is no longer at the expected
// revision. The caller reads again and retries, or gives way.
func IsRevisionConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
