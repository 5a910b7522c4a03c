package client

import (
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/protocol"
)

// jsonNames are the JSON field names of a struct type, embedded fields
// flattened.
func jsonNames(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for f := range t.Fields() {
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for n := range jsonNames(f.Type) {
				out[n] = true
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}

// TestWireMatchesNode: every field this package reads or writes is one the
// gateway's protocol types have, under the same JSON name.
func TestWireMatchesNode(t *testing.T) {
	pairs := []struct{ ours, theirs, also any }{
		{request{}, protocol.Request{}, nil},
		{welcomeFrame{}, protocol.Welcome{}, nil},
		{okFrame{}, protocol.OK{}, protocol.RefreshReply{}},
		{presenceFrame{}, protocol.PresenceReply{}, nil},
		{groupFrame{}, protocol.GroupReply{}, nil},
		{locateFrame{}, protocol.LocateReply{}, nil},
		{eventFrame{}, protocol.Event{}, nil},
		{messageFrame{}, protocol.MessageFrame{}, nil},
		{head{}, protocol.ErrorFrame{}, nil},
		{SessionInfo{}, protocol.SessionInfo{}, nil},
		{Presence{}, protocol.Presence{}, nil},
	}
	for _, p := range pairs {
		ours, theirs := jsonNames(reflect.TypeOf(p.ours)), jsonNames(reflect.TypeOf(p.theirs))
		if p.also != nil {
			maps.Copy(theirs, jsonNames(reflect.TypeOf(p.also)))
		}
		for n := range ours {
			if !theirs[n] {
				t.Errorf("%T has field %q that %T lacks", p.ours, n, p.theirs)
			}
		}
	}
	ops := map[string]string{opHello: protocol.OpHello, opHB: protocol.OpHB, opStatus: protocol.OpStatus, opJoin: protocol.OpJoin,
		opLeave: protocol.OpLeave, opGet: protocol.OpGet, opGroup: protocol.OpGroup, opLocate: protocol.OpLocate, opSub: protocol.OpSub,
		opUnsub: protocol.OpUnsub, opSend: protocol.OpSend, opBye: protocol.OpBye, opRefresh: protocol.OpRefresh,
		opWelcome: protocol.OpWelcome, opEvent: protocol.OpEvent, opMessage: protocol.OpMessage, opError: protocol.OpError}
	for ours, theirs := range ops {
		if ours != theirs {
			t.Errorf("op %q is %q in node", ours, theirs)
		}
	}
	if maxUsersPerRequest != protocol.MaxUsersPerRequest {
		t.Errorf("maxUsersPerRequest %d, node %d", maxUsersPerRequest, protocol.MaxUsersPerRequest)
	}
	codes := map[Code]protocol.ErrorCode{CodeBadJSON: protocol.CodeBadJSON, CodeLineTooLong: protocol.CodeLineTooLong,
		CodeUnknownOp: protocol.CodeUnknownOp, CodeBadRequest: protocol.CodeBadRequest, CodeAuthFailed: protocol.CodeAuthFailed,
		CodeHandshakeTimeout: protocol.CodeHandshakeTimeout, CodeNotAuthenticated: protocol.CodeNotAuthenticated,
		CodeSuperseded: protocol.CodeSuperseded, CodeShuttingDown: protocol.CodeShuttingDown, CodeSlowConsumer: protocol.CodeSlowConsumer,
		CodeExpired: protocol.CodeExpired, CodeInternal: protocol.CodeInternal, CodeOverloaded: protocol.CodeOverloaded,
		CodeEpochExhausted: protocol.CodeEpochExhausted, CodeRateLimited: protocol.CodeRateLimited, CodeForbidden: protocol.CodeForbidden,
		CodeTokenExpired: protocol.CodeTokenExpired, CodeTooManySessions: protocol.CodeTooManySessions,
		CodeTooManyConns: protocol.CodeTooManyConnections}
	for ours, theirs := range codes {
		if string(ours) != string(theirs) {
			t.Errorf("code %q is %q in node", ours, theirs)
		}
	}
}
