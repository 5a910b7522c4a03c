package client

import (
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

func TestLastSeen(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"", time.Time{}, false},
		{"2026-09-24T17:45:00.123Z", time.Date(2026, 9, 24, 17, 45, 0, 123e6, time.UTC), true},
		{"yesterday", time.Time{}, false},
	} {
		got, ok := LastSeen(protocol.Presence{LastSeen: tc.in})
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("LastSeen(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
