package client

import (
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/node"
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
		{request{}, node.Request{}, nil},
		{welcomeFrame{}, node.Welcome{}, nil},
		{okFrame{}, node.OK{}, node.RefreshReply{}},
		{presenceFrame{}, node.PresenceReply{}, nil},
		{groupFrame{}, node.GroupReply{}, nil},
		{locateFrame{}, node.LocateReply{}, nil},
		{eventFrame{}, node.Event{}, nil},
		{messageFrame{}, node.MessageFrame{}, nil},
		{head{}, node.ErrorFrame{}, nil},
		{SessionInfo{}, node.SessionInfo{}, nil},
		{Presence{}, node.Presence{}, nil},
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
	ops := map[string]string{opHello: node.OpHello, opHB: node.OpHB, opStatus: node.OpStatus, opJoin: node.OpJoin,
		opLeave: node.OpLeave, opGet: node.OpGet, opGroup: node.OpGroup, opLocate: node.OpLocate, opSub: node.OpSub,
		opUnsub: node.OpUnsub, opSend: node.OpSend, opBye: node.OpBye, opRefresh: node.OpRefresh,
		opWelcome: node.OpWelcome, opEvent: node.OpEvent, opMessage: node.OpMessage, opError: node.OpError}
	for ours, theirs := range ops {
		if ours != theirs {
			t.Errorf("op %q is %q in node", ours, theirs)
		}
	}
	if maxUsersPerRequest != node.MaxUsersPerRequest {
		t.Errorf("maxUsersPerRequest %d, node %d", maxUsersPerRequest, node.MaxUsersPerRequest)
	}
	codes := map[Code]node.ErrorCode{CodeBadJSON: node.CodeBadJSON, CodeLineTooLong: node.CodeLineTooLong,
		CodeUnknownOp: node.CodeUnknownOp, CodeBadRequest: node.CodeBadRequest, CodeAuthFailed: node.CodeAuthFailed,
		CodeHandshakeTimeout: node.CodeHandshakeTimeout, CodeNotAuthenticated: node.CodeNotAuthenticated,
		CodeSuperseded: node.CodeSuperseded, CodeShuttingDown: node.CodeShuttingDown, CodeSlowConsumer: node.CodeSlowConsumer,
		CodeExpired: node.CodeExpired, CodeInternal: node.CodeInternal, CodeOverloaded: node.CodeOverloaded,
		CodeEpochExhausted: node.CodeEpochExhausted, CodeRateLimited: node.CodeRateLimited, CodeForbidden: node.CodeForbidden,
		CodeTokenExpired: node.CodeTokenExpired, CodeTooManySessions: node.CodeTooManySessions,
		CodeTooManyConns: node.CodeTooManyConnections}
	for ours, theirs := range codes {
		if string(ours) != string(theirs) {
			t.Errorf("code %q is %q in node", ours, theirs)
		}
	}
}
